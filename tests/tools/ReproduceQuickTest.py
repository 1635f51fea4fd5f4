#!/usr/bin/env python3
"""End-to-end test of tools/reproduce/reproduce.py --quick: runs the reduced sweep with the
built aps_train and checks what a user relies on: every run finished, the tables hold real
numbers, FP8 really sends about a quarter of fp32's bytes, the plots are PNG images, a second
invocation skips the finished runs, and --report-only regenerates the same tables."""

import argparse
import json
import math
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "reproduce" / "reproduce.py"


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def reproduce(args, out, docs, aps_train, extra=(), expect_rc=0):
    # Two runs at a time, one thread each: the cheapest way through on 2 cores.
    # The sweep with every kind of table and plot (the default, sweep_scale.json, has no segmentation).
    cmd = [sys.executable, str(SCRIPT), "--quick", "--jobs", "2", "--out", str(out), "--docs", str(docs),
           "--aps-train", aps_train, "--sweep", str(ROOT / "tools" / "reproduce" / "sweep.json"), *extra]
    print("$ " + " ".join(cmd), flush=True)
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stdout + p.stderr, flush=True)
    check(p.returncode == expect_rc, f"reproduce.py exited with {p.returncode}, expected {expect_rc}")
    return p.stdout + p.stderr, time.monotonic() - start


def png_size(path):
    data = path.read_bytes()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--aps-train", required=True)
    parser.add_argument("--work", required=True, help="scratch directory (emptied first)")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    out, docs = work / "out", work / "docs"

    stdout, first_seconds = reproduce(args, out, docs, args.aps_train)
    sweep = json.loads((ROOT / "tools" / "reproduce" / "sweep.json").read_text())
    expected = sweep["quick"]["runs"]

    summary = json.loads((docs / "results" / "summary.json").read_text())
    runs = {r["id"]: r for r in summary["runs"]}
    check(sorted(runs) == sorted(expected), f"summary holds {sorted(runs)}, expected {sorted(expected)}")
    for rid, r in runs.items():
        check(r["status"] == "ok", f"{rid}: status {r['status']} {r.get('error', '')}")
        metric = r["miou"] if rid.startswith("seg-") else r["top1"]
        check(math.isfinite(metric) and 0.0 < metric <= 1.0, f"{rid}: test metric {metric} is not in (0, 1]")
        check(r["step_seconds"] and r["step_seconds"] > 0, f"{rid}: no step time")
        check(r["bytes_per_step"] and r["bytes_per_step"] > 0, f"{rid}: no bytes per step")
        check(len(r["curve"]) >= 1, f"{rid}: no per-epoch accuracy")
    # Classification runs train 2 quick epochs: one eval record plus the final one.
    check(len(runs["r8-fp32-s1"]["curve"]) == 2, f"r8-fp32-s1 curve {runs['r8-fp32-s1']['curve']}")
    # Low precision is real on the wire: 1-byte E4M3 codes against 4-byte fp32 values.
    ratio = runs["r8-e4m3-s1"]["bytes_per_step"] / runs["r8-fp32-s1"]["bytes_per_step"]
    check(0.2 < ratio < 0.3, f"e4m3 sends {ratio:.3f} of fp32's bytes per step, expected about 0.25")
    # Two seeds of one configuration are different runs.
    check(runs["r8-fp32-s1"]["curve"] != runs["r8-fp32-s2"]["curve"] or
          runs["r8-fp32-s1"]["step_seconds"] != runs["r8-fp32-s2"]["step_seconds"], "seeds 1 and 2 ran identically")
    check("layer_stats" in runs["r8-e4m3_aps-s1"], "no per-layer flushed/saturated statistics for e4m3 + APS")

    text = (docs / "RESULTS.md").read_text()
    for label, pattern in [("fp32", r"\| fp32 \| \d+\.\d\d ± \d+\.\d\d \(n=2\) \|"),
                           # one seed: a delta without an interval, so no TOST verdict; no skipped step
                           ("e4m3 + APS",
                            r"\| e4m3 \+ APS \| \d+\.\d\d \| [+-]\d+\.\d\d \|  \| 0 \| [\d,]+\.\d \| [\d,]+ \|"),
                           ("segmentation", r"## Segmentation"),
                           ("literature", r"76\.71"),
                           ("budget model", r"Total [\d,]+ CPU-s; on \d+ cores"),
                           ("measured budget", r"Whole sweep at these run times: [\d,]+ s")]:
        check(re.search(pattern, text), f"RESULTS.md has no {label} line matching {pattern!r}")

    for name in ["accuracy_fp32_fp16.png", "accuracy_e4m3.png", "heatmap_r8_e4m3.png", "miou_seg.png"]:
        path = docs / "results" / name
        check(path.exists(), f"plot {name} was not written")
        width, height = png_size(path)
        check(width >= 300 and height >= 200, f"plot {name} is only {width}x{height}")
        check(f"results/{name}" in text, f"RESULTS.md does not show {name}")

    # Resumable: a second invocation finds every final record and trains nothing.
    stdout, second_seconds = reproduce(args, out, docs, args.aps_train)
    check(stdout.count(": skipped") == len(expected), "the second invocation re-ran finished runs")

    # --report-only regenerates the same tables from the metrics.
    (docs / "RESULTS.md").unlink()
    reproduce(args, out, docs, args.aps_train, ["--report-only"])
    again = (docs / "RESULTS.md").read_text()
    strip = lambda t: [l for l in t.splitlines() if l.startswith("|")]
    check(strip(again) == strip(text), "--report-only wrote different tables")
    # A configuration aps_train rejects fails its run, not the sweep: the others still run, the
    # report marks the cell and quotes the error, and the exit status says something failed.
    sweep["variants"].append({"name": "bogus", "label": "bogus format", "family": "e4m3", "settings": ["r8"],
                              "seeds": [1], "set": {"precision.format": "e9m9"}})
    bad_sweep = work / "bad_sweep.json"
    bad_sweep.write_text(json.dumps(sweep))
    bad_docs = work / "bad_docs"
    output, _ = reproduce(args, out, bad_docs, args.aps_train,
                          ["--sweep", str(bad_sweep), "--only", "r8-bogus-s1,r8-fp32-s1"], expect_rc=1)
    check("r8-bogus-s1: failed" in output and "r8-fp32-s1: skipped" in output, "the failed run was not reported")
    bad = (bad_docs / "RESULTS.md").read_text()
    check(re.search(r"\| bogus format \| failed¹ \|", bad), "RESULTS.md does not mark the failed run")
    check("e9m9" in bad, "RESULTS.md does not quote the failed run's error")
    print(f"PASS: {len(expected)} quick runs in {first_seconds:.0f} s; rerun {second_seconds:.1f} s")


if __name__ == "__main__":
    main()
