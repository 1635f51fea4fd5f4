#!/usr/bin/python3
"""tools/aps_bench_train/compare.sh on a tiny workload (seconds): one round prints aps's line,
PyTorch's line and their ratios; --rounds N runs N such rounds and ends with the median,
lowest and highest of the N ratios; a bad --rounds is refused with exit 2. PyTorch runs with
the C heap settings aps sets for itself unless APS_COMPARE_TORCH_HEAP=default."""

import argparse
import json
import os
import statistics
import stat
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools/aps_bench_train/compare.sh"
WORKLOAD = ["--model", "resnet20", "--input", "1x12x12", "--batch", "4", "--threads", "1", "--steps", "1",
            "--warmup", "0"]


def run(bench, extra, **more):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(APS_BENCH_TRAIN=bench, **more)
    return subprocess.run(["bash", str(SCRIPT), *extra], cwd=ROOT, capture_output=True, text=True, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aps-bench-train", required=True)
    args = ap.parse_args()

    one = run(args.aps_bench_train, WORKLOAD)
    assert one.returncode == 0, one.stderr
    lines = [json.loads(line) for line in one.stdout.splitlines()]
    assert len(lines) == 3, one.stdout
    assert lines[1]["tool"] == "torch_bench", lines[1]
    ratio = lines[2]["speed_ratio_aps_over_torch"]
    assert abs(ratio - lines[0]["images_per_s"] / lines[1]["images_per_s"]) < 1e-3, lines

    three = run(args.aps_bench_train, ["--rounds", "3", *WORKLOAD])
    assert three.returncode == 0, three.stderr
    lines = [json.loads(line) for line in three.stdout.splitlines()]
    assert len(lines) == 3 * 3 + 1, three.stdout
    assert [l["tool"] for l in lines[:2] + lines[3:5] + lines[6:8]] == ["aps_bench_train", "torch_bench"] * 3, lines
    rounds = [lines[3 * i + 2] for i in range(3)]
    summary = lines[-1]
    ratios = [r["speed_ratio_aps_over_torch"] for r in rounds]
    assert summary["rounds"] == 3 and summary["speed_ratios"] == ratios, summary
    assert summary["speed_ratio_median"] == round(statistics.median(ratios), 3), summary
    assert summary["speed_ratio_min"] == min(ratios) and summary["speed_ratio_max"] == max(ratios), summary

    # The heap settings PyTorch's process sees: an interpreter wrapper writes them down.
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "heap.txt"
        wrapper = Path(tmp) / "python"
        wrapper.write_text("#!/bin/bash\n"
                           f"if [[ \"$1\" == *torch_bench.py ]]; then env | grep '^MALLOC_' | sort > '{record}'; fi\n"
                           "exec /usr/bin/python3 \"$@\"\n")
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        tuned = run(args.aps_bench_train, WORKLOAD, PYTHON=str(wrapper))
        assert tuned.returncode == 0, tuned.stderr
        assert json.loads(tuned.stdout.splitlines()[-1])["torch_heap"] == "aps", tuned.stdout
        assert record.read_text().split() == ["MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TOP_PAD_=4194304",
                                              "MALLOC_TRIM_THRESHOLD_=268435456"], record.read_text()
        plain = run(args.aps_bench_train, WORKLOAD, PYTHON=str(wrapper), APS_COMPARE_TORCH_HEAP="default")
        assert plain.returncode == 0, plain.stderr
        assert json.loads(plain.stdout.splitlines()[-1])["torch_heap"] == "default", plain.stdout
        assert record.read_text() == "", record.read_text()
    odd = run(args.aps_bench_train, WORKLOAD, APS_COMPARE_TORCH_HEAP="jemalloc")
    assert odd.returncode == 2 and "APS_COMPARE_TORCH_HEAP must be 'aps' or 'default', got 'jemalloc'" in odd.stderr, odd.stderr

    bad = run(args.aps_bench_train, ["--rounds", "zero", *WORKLOAD])
    assert bad.returncode == 2 and "--rounds needs a positive integer, got 'zero'" in bad.stderr, bad.stderr
    print("compare: ok")


if __name__ == "__main__":
    main()
