#!/usr/bin/env bash
# netsim: run an MPI job across emulated hosts on one machine. Each rank gets its own
# network namespace (<prefix>-r<k>, address <subnet>.<k+1>/24 on eth0) joined by a veth
# pair to a bridge that lives in a namespace of its own (<prefix>-sw), and every link is
# shaped with tc (tbf for bandwidth; netem for delay where the kernel has it). mpirun runs
# inside rank 0's namespace and starts the other ranks' daemons through an rsh agent that
# uses `ip netns exec`, so all MPI traffic crosses the shaped links over TCP.
# Nothing is created or addressed outside the namespaces this script creates.
#
#   netsim.sh up   -n N [--rate 10gbit] [--delay 50us] [--prefix aps] [--subnet 10.77.0]
#   netsim.sh run  -n N [--rate R] [--delay D] [--prefix P] [--keep] -- command [args...]
#                  (up, mpirun -np N command, then down unless --keep)
#   netsim.sh mpirun -n N [--prefix P] -- command [args...]   (on namespaces already up)
#   netsim.sh down [--prefix aps]
#   netsim.sh status [--prefix aps]
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2, tc and util-linux unshare.
set -euo pipefail

prefix=aps
subnet=10.77.0
ranks=0
rate=10gbit
delay=""
keep=0
command_args=()

die() { echo "netsim: $*" >&2; exit 1; }

parse() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -n|--ranks) ranks="$2"; shift 2 ;;
      --rate) rate="$2"; shift 2 ;;
      --delay) delay="$2"; shift 2 ;;
      --prefix) prefix="$2"; shift 2 ;;
      --subnet) subnet="$2"; shift 2 ;;
      --keep) keep=1; shift ;;
      --) shift; command_args=("$@"); return ;;
      *) die "unknown option '$1' (see the header of $0)" ;;
    esac
  done
}

# Bytes per second of a tc rate such as 10gbit, 500mbit, 100kbit.
rate_bytes() {
  local r="$1" n unit
  n="${r%%[a-zA-Z]*}"
  unit="${r#"$n"}"
  case "$unit" in
    gbit) echo $(( n * 1000000000 / 8 )) ;;
    mbit) echo $(( n * 1000000 / 8 )) ;;
    kbit) echo $(( n * 1000 / 8 )) ;;
    bit) echo $(( n / 8 )) ;;
    *) die "--rate '$r': use an integer with gbit, mbit or kbit" ;;
  esac
}

have_netem() {
  local ns="$1" dev="$2"
  tc -n "$ns" qdisc add dev "$dev" root handle 9: netem delay 1us >/dev/null 2>&1 || return 1
  tc -n "$ns" qdisc del dev "$dev" root >/dev/null 2>&1 || true
}

# Shapes the egress of one link end: bandwidth with tbf (burst of ~10 ms, at least 64 KiB),
# delay with netem underneath when the kernel provides it.
shape() {
  local ns="$1" dev="$2" bps burst
  bps=$(rate_bytes "$rate")
  burst=$(( bps / 100 ))
  (( burst < 65536 )) && burst=65536
  if [[ -n "$delay" ]]; then
    if have_netem "$ns" "$dev"; then
      tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay"
      tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency 100ms
      return
    fi
    [[ -n "${warned:-}" ]] || echo "netsim: warning: this kernel has no netem; --delay $delay is not applied" >&2
    warned=1
  fi
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

up() {
  [[ "$ranks" -ge 1 && "$ranks" -le 250 ]] || die "-n must be 1..250, got '$ranks'"
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
  ip netns list | grep -q "^${prefix}-" && die "namespaces '${prefix}-*' exist; run '$0 down --prefix $prefix' first"
  local sw="${prefix}-sw"
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  for ((k = 0; k < ranks; k++)); do
    local ns="${prefix}-r${k}"
    ip netns add "$ns"
    # Both ends are created inside the switch namespace, then one moves to the rank's:
    # no interface ever appears in the caller's namespace.
    ip -n "$sw" link add "p${k}" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p${k}" master br0
    ip -n "$sw" link set "p${k}" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${subnet}.$((k + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0
    shape "$sw" "p${k}"
  done
  echo "netsim: ${ranks} hosts ${subnet}.1-${subnet}.${ranks} at ${rate}${delay:+, delay ${delay}} (prefix ${prefix})"
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-" || true); do
    ip netns del "$ns"
  done
}

status() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-" || true); do
    echo "== $ns"
    ip -n "$ns" -brief addr
    tc -n "$ns" qdisc show | grep -v noqueue || true
  done
}

run_mpi() {
  [[ ${#command_args[@]} -gt 0 ]] || die "no command after --"
  ip netns list | grep -q "^${prefix}-r$((ranks - 1))\b" || die "namespaces for ${ranks} ranks are not up"
  local dir
  dir=$(mktemp -d /tmp/netsim.XXXXXX)
  for ((k = 0; k < ranks; k++)); do echo "${subnet}.$((k + 1)) slots=1"; done >"$dir/hostfile"
  # OpenMPI's rsh launcher calls: agent <host> <orted command for a remote shell>.
  cat >"$dir/agent" <<AGENT
#!/bin/sh
host="\$1"; shift
k=\$(( \${host##*.} - 1 ))
exec ip netns exec "${prefix}-r\$k" unshare --uts sh -c "hostname ${prefix}-r\$k; \$*"
AGENT
  chmod +x "$dir/agent"
  local status=0
  # Distinct hostnames (unshare --uts) make OpenMPI treat the namespaces as separate nodes,
  # so ranks talk over TCP on eth0 rather than shared memory.
  ip netns exec "${prefix}-r0" unshare --uts sh -c 'hostname "$0"; exec "$@"' "${prefix}-r0" \
    mpirun --allow-run-as-root -np "$ranks" --hostfile "$dir/hostfile" --map-by node \
    --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self --mca btl_tcp_if_include eth0 \
    --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS=1 "${command_args[@]}" || status=$?
  rm -rf "$dir"
  return "$status"
}

action="${1:-}"
[[ -n "$action" ]] || die "usage: $0 up|run|mpirun|down|status [options] (see the header)"
shift
parse "$@"
case "$action" in
  up) up ;;
  down) down ;;
  status) status ;;
  mpirun) run_mpi ;;
  run)
    up
    [[ "$keep" -eq 1 ]] || trap down EXIT
    run_mpi
    ;;
  *) die "unknown action '$action' (up, run, mpirun, down, status)" ;;
esac
