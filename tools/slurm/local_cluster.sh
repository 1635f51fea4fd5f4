#!/usr/bin/env bash
# A one-node Slurm cluster on this machine from Debian's packages (slurmctld, slurmd,
# slurm-client, munge), for running aps_train under srun/sbatch with Open MPI's PMIx support:
#
#   tools/slurm/local_cluster.sh start [--install]   # write the config, start munged, slurmctld, slurmd
#   tools/slurm/local_cluster.sh status              # daemons, sinfo, squeue, srun's MPI plugins
#   tools/slurm/local_cluster.sh stop [--purge]      # cancel jobs, stop the daemons (--purge: drop state and logs)
#
#   sbatch tools/slurm/train.sbatch                  # then, from the repository root
#   srun -n2 build/bin/aps_train --config configs/... --set comm.backend=mpi --set comm.world_size=1
#
# Root only. Every step is idempotent and printed. The node is this host (`hostname -s`, address
# 127.0.0.1) with all its CPUs and its memory less a margin, in partition "debug" (the default;
# its jobs are requeued, after SIGTERM and a 60 s grace time, when a job of partition "high"
# needs the CPUs: `sbatch -p high ...` tests a preemption); no
# cgroups (proctrack/linuxproc, task/none), no accounting database (sacct does not work: use
# squeue, `scontrol show job ID` or /var/log/aps-slurm/jobcomp.log), MpiDefault=pmix (a plain
# srun starts Open MPI ranks; Debian's Open MPI cannot use --mpi=pmi2). It writes
# /etc/slurm/slurm.conf (refusing to replace one this script did not write) and keeps its state,
# logs and pid files in /var/spool/aps-slurm, /var/log/aps-slurm and /run/aps-slurm. --install runs
# `apt-get install` for the missing packages; without it a missing package is an error.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARKER="# Written by aps tools/slurm/local_cluster.sh"
SPOOL=/var/spool/aps-slurm
LOGS=/var/log/aps-slurm
RUN=/run/aps-slurm
MUNGE_KEY=/etc/munge/munge.key
MUNGE_RUN=/run/munge
PMIX_PLUGIN=/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so
# Slurm's pmix plugin dlopen()s the unversioned libpmix.so, which only libpmix-dev ships.
LIBPMIX=/usr/lib/x86_64-linux-gnu/libpmix.so

say() { printf '[local_cluster] %s\n' "$*"; }
die() {
  printf '[local_cluster] error: %s\n' "$*" >&2
  exit 1
}
run() {
  say "+ $*"
  "$@"
}

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }  # pid file -> its process runs

# --- packages --------------------------------------------------------------------------------
missing_packages() {
  local missing=()
  command -v munged >/dev/null && command -v munge >/dev/null || missing+=(munge)
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sinfo >/dev/null && command -v srun >/dev/null && command -v scontrol >/dev/null || missing+=(slurm-client)
  [[ -e $PMIX_PLUGIN ]] || missing+=(slurm-wlm-basic-plugins)
  [[ -e $LIBPMIX ]] || missing+=(libpmix-dev)
  printf '%s\n' "${missing[@]}"
}

check_packages() {
  local install=$1 missing
  mapfile -t missing < <(missing_packages | sed '/^$/d')
  ((${#missing[@]} == 0)) && return 0
  if ((install)); then
    run apt-get update
    DEBIAN_FRONTEND=noninteractive run apt-get install -y --no-install-recommends "${missing[@]}"
    mapfile -t missing < <(missing_packages | sed '/^$/d')
    ((${#missing[@]} == 0)) || die "still missing after apt-get install: ${missing[*]}"
  else
    die "missing Debian package(s): ${missing[*]} (install them with: apt-get install ${missing[*]}, or run: $0 start --install)"
  fi
}

# --- munge -----------------------------------------------------------------------------------
munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if [[ ! -s $MUNGE_KEY ]]; then
    say "no $MUNGE_KEY: generating one"
    run mungekey --create --keyfile="$MUNGE_KEY"
  fi
  chown munge:munge "$MUNGE_KEY" && chmod 400 "$MUNGE_KEY"
  if munge_works; then
    say "munged already running"
    return
  fi
  install -d -o munge -g munge -m 755 "$MUNGE_RUN"
  install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
  # munged refuses to run as root; it daemonizes itself.
  run runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 20); do munge_works && break; sleep 0.25; done
  munge_works || die "munged did not start (see /var/log/munge/munged.log)"
  say "munged running (pid $(cat $MUNGE_RUN/munged.pid))"
}

# --- slurm.conf ------------------------------------------------------------------------------
write_conf() {
  local host cpus memMb realMem tmp
  host=$(hostname -s)
  cpus=$(nproc --all)
  memMb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  # Leave 10% (at least 512 MB) for the system; slurmd rejects a node claiming more than it has.
  realMem=$((memMb - (memMb / 10 > 512 ? memMb / 10 : 512)))
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
$MARKER ($(date -u +%FT%TZ)); edit that script, not this file.
ClusterName=apslocal
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
# Jobs in "debug" (the default) are requeued when a job of "high" needs their CPUs: SIGTERM to
# their steps, then SIGKILL after GraceTime seconds (a local test of aps_train's preemption).
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$realMem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=60
PartitionName=high Nodes=$host MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
  if [[ -e $CONF ]] && ! grep -qF "$MARKER" "$CONF"; then
    rm -f "$tmp"
    die "$CONF exists and was not written by this script; move it away first (this script will not replace a real cluster's config)"
  fi
  install -d -m 755 /etc/slurm
  if [[ -e $CONF ]] && diff -q <(sed 1d "$CONF") <(sed 1d "$tmp") >/dev/null; then
    say "$CONF up to date (node $host, CPUs=$cpus, RealMemory=$realMem)"
    rm -f "$tmp"
  else
    say "writing $CONF (node $host, CPUs=$cpus, RealMemory=$realMem MB of $memMb)"
    install -m 644 "$tmp" "$CONF"
    rm -f "$tmp"
  fi
}

# --- daemons ---------------------------------------------------------------------------------
node_state() { sinfo -h -N -n "$(hostname -s)" -o '%T' 2>/dev/null | head -1; }

# A slurmctld or slurmd this script did not start (e.g. the packages' systemd units) would hold
# the ports: refuse rather than start a second one.
check_foreign() {  # daemon
  local d=$1 ours="" others
  alive "$RUN/$d.pid" && ours=$(cat "$RUN/$d.pid")
  others=$(pgrep -x "$d" | grep -vx "${ours:-none}" | paste -sd' ' || true)
  [[ -z ${others// /} ]] ||
    die "a $d this script did not start is running (pid $others); stop it first (e.g. systemctl stop slurmctld slurmd)"
}

start_slurm() {
  install -d -m 755 "$SPOOL/slurmctld" "$SPOOL/slurmd" "$LOGS" "$RUN"
  check_foreign slurmctld
  check_foreign slurmd
  if alive "$RUN/slurmctld.pid"; then
    say "slurmctld already running (pid $(cat "$RUN/slurmctld.pid"))"
  else
    run slurmctld  # daemonizes; recovers job state from $SPOOL/slurmctld if there is any
    for _ in $(seq 40); do scontrol ping >/dev/null 2>&1 && break; sleep 0.25; done
    scontrol ping >/dev/null 2>&1 || die "slurmctld did not come up (see $LOGS/slurmctld.log)"
    say "slurmctld running (pid $(cat "$RUN/slurmctld.pid"))"
  fi
  if alive "$RUN/slurmd.pid"; then
    say "slurmd already running (pid $(cat "$RUN/slurmd.pid"))"
  else
    run slurmd
    for _ in $(seq 40); do alive "$RUN/slurmd.pid" && break; sleep 0.25; done
    alive "$RUN/slurmd.pid" || die "slurmd did not start (see $LOGS/slurmd.log)"
    say "slurmd running (pid $(cat "$RUN/slurmd.pid"))"
  fi
  local state=""
  for _ in $(seq 60); do
    state=$(node_state)
    case $state in
      idle | mixed | allocated | completing) break ;;
      down* | drain*)
        say "node $(hostname -s) is $state: resuming it"
        scontrol update nodename="$(hostname -s)" state=resume || true
        ;;
    esac
    sleep 0.5
  done
  case $state in
    idle | mixed | allocated | completing) say "node $(hostname -s) is $state; the cluster is up" ;;
    *) die "node $(hostname -s) is '${state:-unknown}' after 30 s (see $LOGS/slurmd.log and $LOGS/slurmctld.log)" ;;
  esac
  run sinfo
}

stop_pidfile() {  # name pidfile
  local name=$1 pidfile=$2 pid
  if ! alive "$pidfile"; then
    say "$name not running"
    return
  fi
  pid=$(cat "$pidfile")
  run kill -TERM "$pid"
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) still running after 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  say "$name stopped"
}

cmd_start() {
  local install=$1
  check_packages "$install"
  start_munge
  if alive "$RUN/slurmctld.pid" || alive "$RUN/slurmd.pid"; then
    say "slurm daemons already running: keeping $CONF as it is"
  else
    write_conf
  fi
  start_slurm
}

cmd_status() {
  local rc=0
  if command -v munge >/dev/null && munge_works; then say "munged: running"; else
    say "munged: not running"
    rc=1
  fi
  for d in slurmctld slurmd; do
    if alive "$RUN/$d.pid"; then say "$d: running (pid $(cat "$RUN/$d.pid"))"; else
      say "$d: not running"
      rc=1
    fi
  done
  if ((rc == 0)); then
    say "node $(hostname -s): $(node_state)"
    run sinfo
    run squeue
    run srun --mpi=list
  fi
  return $rc
}

cmd_stop() {
  local purge=$1 jobs
  if alive "$RUN/slurmctld.pid" && scontrol ping >/dev/null 2>&1; then
    jobs=$(squeue -h -o %i | tr '\n' ' ')
    if [[ -n ${jobs// /} ]]; then
      say "cancelling jobs still queued or running: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs || true
      for _ in $(seq 60); do [[ -z $(squeue -h -o %i) ]] && break; sleep 0.5; done
    fi
  fi
  stop_pidfile slurmd "$RUN/slurmd.pid"
  stop_pidfile slurmctld "$RUN/slurmctld.pid"
  stop_pidfile munged "$MUNGE_RUN/munged.pid"
  if ((purge)); then
    run rm -rf "$SPOOL" "$LOGS" "$RUN"
    if [[ -e $CONF ]] && grep -qF "$MARKER" "$CONF"; then run rm -f "$CONF"; fi
  fi
}

main() {
  [[ $# -ge 1 ]] || usage
  local cmd=$1 install=0 purge=0
  shift
  for a in "$@"; do
    case $a in
      --install) install=1 ;;
      --purge) purge=1 ;;
      -h | --help) usage ;;
      *) die "unknown option '$a' (see $0 --help)" ;;
    esac
  done
  [[ $cmd == -h || $cmd == --help ]] && usage
  ((EUID == 0)) || die "must run as root (it starts munged, slurmctld and slurmd and writes $CONF)"
  case $cmd in
    start) cmd_start "$install" ;;
    status) cmd_status ;;
    stop) cmd_stop "$purge" ;;
    *) die "unknown command '$cmd': start, status or stop" ;;
  esac
}

main "$@"
