#!/usr/bin/python3
"""Where a training step's time goes, op by op, in aps and in PyTorch on the same shapes:
writes docs/PERFORMANCE.md.

    /usr/bin/python3 tools/perf/breakdown.py                 # the three workloads, 2 threads, and the targets
    /usr/bin/python3 tools/perf/breakdown.py --steps 5 --target-rounds 0 --out /tmp/PERFORMANCE.md

Runs build/bin/aps_bench_train --profile (framework/core/Profile.h: exclusive time per kernel,
backward node and optimizer) and tools/aps_bench_train/torch_bench.py --profile
(torch.profiler's self CPU time per aten op, grouped into the same categories), and
build/bin/aps_bench_ops --peaks for the machine's SGEMM GFLOP/s and stream-copy GB/s. Each
category's rate uses aps's count of the work (FLOPs for convolutions and GEMMs, bytes moved
otherwise) for both frameworks, since the shapes are the same. Needs python3-torch; measure
on an idle machine (the load average is printed into the report).

The file is rewritten whole: the generated tables, then tools/perf/reading.md appended as it
is (the hand-written reading of the figures). Edit the reading there, never in the output.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = [  # (model, input, batch): the performance issue's three
    ("resnet20", "1x28x28", 128),
    ("resnet20", "3x32x32", 128),
    ("resnet50", "3x224x224", 8),
]
# Rows of the table: aps categories (profile scope names) and the PyTorch ones they meet.
ROWS = [
    ("conv forward", ["conv.forward"], ["conv.forward"], "flops"),
    ("conv backward (data + weight + bias)", ["conv.backward_data", "conv.backward_weight", "conv.backward_bias"],
     ["conv.backward"], "flops"),
    ("  of which backward-data", ["conv.backward_data"], [], "flops"),
    ("  of which backward-weight", ["conv.backward_weight"], [], "flops"),
    ("batch norm forward", ["batchnorm.forward"], ["batchnorm.forward"], "bytes"),
    ("batch norm backward", ["batchnorm.backward"], ["batchnorm.backward"], "bytes"),
    ("element-wise (ReLU, add; forward and backward)", ["elementwise"], ["elementwise"], "bytes"),
    ("pooling", ["pool.forward", "pool.backward"], ["pool.forward", "pool.backward"], "bytes"),
    ("linear (classifier)", ["linear.forward", "linear.backward"], ["linear.forward", "linear.backward"], "flops"),
    ("loss", ["loss.forward", "loss.backward"], ["loss.forward", "loss.backward"], "bytes"),
    ("optimizer step (SGD, momentum)", ["optimizer"], ["optimizer"], "bytes"),
    ("zero_grad", ["optimizer.zero_grad"], ["optimizer.zero_grad"], "bytes"),
    ("autograd engine (graph walk, gradient accumulation, node glue)", ["autograd.engine", "*Backward", "AccumulateGrad"],
     ["autograd.engine"], None),
]


# The C heap settings aps's CpuAllocator sets for itself, and the huge pages aps's tools ask
# glibc for; PyTorch gets them too, as in compare.sh (with glibc's defaults its heap is trimmed
# and faulted in again, and its speed moved by up to 2.5x between runs of the same command).
TORCH_HEAP = {"MALLOC_TRIM_THRESHOLD_": "268435456", "MALLOC_TOP_PAD_": "4194304", "MALLOC_MMAP_THRESHOLD_": "33554432",
              "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def run_json(cmd, env=None):
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def pick(ops, names):
    """Sum of ms, flops and bytes per step over the categories `names` (a '*Backward' name
    matches every backward node)."""
    ms = flops = gb = 0.0
    for op, v in ops.items():
        if any(op == n or (n == "*Backward" and op.endswith("Backward")) for n in names):
            ms += v["ms_per_step"]
            flops += v.get("gflop_per_step", 0.0)
            gb += v.get("gb_per_step", 0.0)
    return ms, flops, gb


def rate(kind, gflop, gb, ms):
    """GFLOP/s or GB/s; None for rows without a work count (aps's element-wise row, whose work
    its batch norm now does) or too short to time (< 0.5 ms)."""
    work = gflop if kind == "flops" else gb
    if ms is None or ms < 0.5 or kind is None or not work:
        return None
    return work / (ms / 1e3)


def fmt(v, digits=1):
    return "–" if v is None else f"{v:,.{digits}f}"


def workload_section(model, image, batch, threads, steps, peaks, aps_bin, python):
    common = ["--model", model, "--input", image, "--batch", str(batch), "--threads", str(threads),
              "--steps", str(steps), "--warmup", "2", "--profile"]
    aps = run_json([str(aps_bin)] + common)
    torch = run_json([python, str(ROOT / "tools" / "aps_bench_train" / "torch_bench.py")] + common,
                     env=dict(os.environ, **TORCH_HEAP))
    a_ops, t_ops = aps["profile"]["ops"], torch["profile"]["ops"]
    a_step, t_step = aps["profile"]["step_ms"], torch["profile"]["step_ms"]
    lines = [f"### {model}, {image}, batch {batch}, {threads} threads", "",
             f"Unprofiled: aps {aps['images_per_s']:,.1f} images/s ({aps['step_ms']:,.1f} ms/step), PyTorch "
             f"{torch['images_per_s']:,.1f} images/s ({torch['step_ms']:,.1f} ms/step): aps/PyTorch "
             f"**{aps['images_per_s'] / torch['images_per_s']:.2f}x**; peak RSS aps {aps['peak_rss_mib']:,.0f} MiB, "
             f"PyTorch {torch['peak_rss_mib']:,.0f} MiB. Profiled step: aps {a_step:,.1f} ms, PyTorch {t_step:,.1f} ms "
             "(the profilers' own cost included).", "",
             "| op | aps ms/step | aps share | aps rate | aps % of peak | PyTorch ms/step | PyTorch rate | "
             "PyTorch % of peak | aps/PyTorch time |",
             "|---|---|---|---|---|---|---|---|---|"]
    a_sum = t_sum = 0.0
    for label, a_names, t_names, kind in ROWS:
        ms, gflop, gb = pick(a_ops, a_names)
        tms = sum(t_ops.get(n, {}).get("ms_per_step", 0.0) for n in t_names) if t_names else None
        if ms == 0 and not tms:
            continue
        if not label.startswith("  "):
            a_sum += ms
            t_sum += tms or 0.0
        peak = peaks["sgemm_gflops"] if kind == "flops" else peaks["copy_gbs"] if kind == "bytes" else None
        unit = " GFLOP/s" if kind == "flops" else " GB/s" if kind == "bytes" else ""
        ar = rate(kind, gflop, gb, ms)
        tr = rate(kind, gflop, gb, tms) if tms else None
        lines.append("| " + " | ".join([
            label, fmt(ms), f"{100 * ms / a_step:.0f}%",
            fmt(ar) + (unit if ar is not None else ""), fmt(100 * ar / peak if ar and peak else None, 0) + ("%" if ar and peak else ""),
            fmt(tms), fmt(tr) + (unit if tr is not None else ""),
            fmt(100 * tr / peak if tr and peak else None, 0) + ("%" if tr and peak else ""),
            f"{ms / tms:.2f}" if tms else "–"]) + " |")
    lines.append(f"| everything else (allocation, views, copies, the model's forward glue) | {fmt(a_step - a_sum)} | "
                 f"{100 * (a_step - a_sum) / a_step:.0f}% | | | {fmt(t_step - t_sum)} | | | |")
    lines.append("")
    return lines, {"model": model, "input": image, "batch": batch, "aps": aps, "torch": torch}


# The performance issue's speed targets: aps/PyTorch images per second, unprofiled, as the
# median of paired rounds (tools/aps_bench_train/compare.sh --rounds): (model, input, batch,
# threads, steps, target).
TARGETS = [
    ("resnet20", "1x28x28", 128, 1, 6, 1.2),
    ("resnet20", "1x28x28", 128, 2, 6, 1.2),
    ("resnet20", "3x32x32", 128, 1, 6, 1.2),
    ("resnet20", "3x32x32", 128, 2, 6, 1.2),
    ("resnet50", "3x224x224", 8, 2, 3, 1.0),
    ("resnet50", "3x224x224", 32, 2, 2, 1.0),
]


def targets_section(rounds, aps_bin, python):
    lines = ["## The targets, paired", "",
             f"aps/PyTorch images per second without the profile: {rounds} rounds of "
             "`tools/aps_bench_train/compare.sh --rounds` (each round runs aps and PyTorch back to back, alternating "
             "which goes first; the median of the rounds' ratios, lowest and highest in brackets). On a shared machine "
             "whose speed drifts between minutes this is the figure to read, not one run's images per second.", "",
             "| workload | threads | aps/PyTorch (median) | lowest - highest | target | aps images/s | PyTorch images/s |",
             "|---|---|---|---|---|---|---|"]
    env = dict(os.environ, APS_BENCH_TRAIN=str(aps_bin), PYTHON=python)
    for model, image, batch, threads, steps, target in TARGETS:
        cmd = ["bash", str(ROOT / "tools" / "aps_bench_train" / "compare.sh"), "--rounds", str(rounds),
               "--model", model, "--input", image, "--batch", str(batch), "--threads", str(threads),
               "--steps", str(steps), "--warmup", "2"]
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, env=env).stdout
        last = json.loads(out.strip().splitlines()[-1])
        median = last.get("speed_ratio_median", last.get("speed_ratio_aps_over_torch"))
        low = last.get("speed_ratio_min", median)
        high = last.get("speed_ratio_max", median)
        aps_ips = last.get("aps_images_per_s_median", last.get("aps_images_per_s"))
        torch_ips = last.get("torch_images_per_s_median", last.get("torch_images_per_s"))
        lines.append(f"| {model}, {image}, batch {batch} | {threads} | **{median:.2f}x** | {low:.2f} - {high:.2f} | "
                     f">= {target:.1f} | {aps_ips:,.1f} | {torch_ips:,.1f} |")
        print(f"breakdown.py: target {model} {image} batch {batch} {threads} threads: aps/PyTorch {median:.2f}x",
              flush=True)
    lines.append("")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="profiled steps per workload (ResNet-50: a fifth)")
    p.add_argument("--out", default=str(ROOT / "docs" / "PERFORMANCE.md"))
    p.add_argument("--bin", default=str(ROOT / "build" / "bin"), help="where aps_bench_train and aps_bench_ops are")
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch")
    p.add_argument("--only", help="only the workload whose model name matches")
    p.add_argument("--target-rounds", type=int, default=3,
                   help="paired rounds per speed target (the targets table; 0 leaves it out)")
    args = p.parse_args()
    binary = Path(args.bin)
    for tool in ("aps_bench_train", "aps_bench_ops"):
        if not (binary / tool).exists():
            sys.exit(f"breakdown.py: error: {binary / tool} not found (cmake --build build --target {tool})")
    load_before = os.getloadavg()[0]
    peaks = run_json([str(binary / "aps_bench_ops"), "--peaks", "--threads", str(args.threads)])
    md = ["# Performance: where a training step's time goes", "",
          f"Generated by `/usr/bin/python3 tools/perf/breakdown.py` on "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {load_before:.2f} at the start.", "",
          "Each workload trains on random data (forward, cross-entropy, backward, SGD with momentum) in aps "
          "(`aps_bench_train --profile`) and in PyTorch (`torch_bench.py --profile`). aps's profile is the exclusive "
          "wall time of scopes around its kernels, backward nodes and optimizer (`framework/core/Profile.h`); "
          "PyTorch's is torch.profiler's self CPU time per aten op, grouped into the same rows. A row's rate is "
          "aps's count of its work (FLOPs of the convolutions and GEMMs; bytes each op must at least move "
          "otherwise) over the row's time, for both frameworks (the shapes are the same), held against the "
          f"machine's peaks measured with `aps_bench_ops --peaks --threads {args.threads}`: SGEMM "
          f"**{peaks['sgemm_gflops']:,.0f} GFLOP/s** (Eigen, one single-threaded 512^3 product per thread, as aps's "
          f"kernels call it) and stream copy **{peaks['copy_gbs']:,.1f} GB/s** (bytes read + written). PyTorch "
          "computes a convolution's data and weight gradients in one op, so only their sum compares.", "",
          "## Workloads", ""]
    results = []
    for model, image, batch in WORKLOADS:
        if args.only and args.only != model:
            continue
        steps = max(2, args.steps // 5) if model == "resnet50" else args.steps
        lines, result = workload_section(model, image, batch, args.threads, steps, peaks, binary / "aps_bench_train",
                                         args.python)
        md += lines
        results.append(result)
        print(f"breakdown.py: {model} {image} batch {batch}: aps {result['aps']['images_per_s']} images/s, "
              f"PyTorch {result['torch']['images_per_s']} images/s", flush=True)
    if args.target_rounds > 0 and not args.only:
        md += targets_section(args.target_rounds, binary / "aps_bench_train", args.python)
    md += [f"Load average at the end: {os.getloadavg()[0]:.2f}.", "",
           "## Regenerating", "", "```sh",
           "cmake --build build --target aps_bench_train aps_bench_ops",
           "/usr/bin/python3 tools/perf/breakdown.py            # 5-10 minutes on 2 cores",
           "```", ""]
    notes = ROOT / "tools" / "perf" / "reading.md"
    if notes.exists():
        md += [notes.read_text().rstrip(), ""]
    out = Path(args.out)
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(md))
    os.replace(tmp, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
