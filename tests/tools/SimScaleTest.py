#!/usr/bin/python3
"""tools/perf/sim_scale.py end to end on tiny splits (seconds): the table and JSON it prints for
two splits of one global batch, and its errors for splits that cannot be compared or parsed and
for an aps_train run that fails."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools/perf/sim_scale.py"


def run(args, extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--aps-train", args.aps_train, *extra], cwd=ROOT,
                          capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aps-train", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out = work / "sim_scale.json"
    done = run(args, ["--splits", "2x4,8x1", "--steps", "4", "--interval", "2", "--repeats", "2", "--threads", "1",
                      "--test-samples", "16", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "x" in line.split("|")[1]]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["2 x 4", "8 x 1"], done.stdout
    # The first split against itself: 1.00x best of rounds, and 1.00x in every round.
    assert rows[1].rstrip().endswith("| 1.00x | 1.00x [1.00-1.00] |"), rows[1]
    result = json.loads(out.read_text())
    assert [(r["ranks"], r["batch"]) for r in result["rows"]] == [(2, 4), (8, 1)], result
    first, second = result["rows"]
    assert first["round_ratios"] == [1.0, 1.0], first
    # Each round's ratio pairs the two splits of that round: two rounds, the median between them.
    assert len(second["round_ratios"]) == 2, second
    for i in range(2):
        want = second["round_ms_per_image"][i] / first["round_ms_per_image"][i]
        assert abs(second["round_ratios"][i] - want) < 1e-9 * want, (i, second, first)
    assert min(second["round_ms_per_image"]) == second["ms_per_image"], second  # the best round
    lo, hi = min(second["round_ratios"]), max(second["round_ratios"])
    assert lo <= second["round_ratio_median"] <= hi, second
    assert f"| {second['round_ratio_median']:.2f}x [{lo:.2f}-{hi:.2f}] |" in rows[2], rows[2]
    for r in result["rows"]:
        # The first interval (2 steps) is warm-up; the 2 steps after it are timed: 2 x 8 images.
        assert r["images"] == 16, r
        assert r["ms_per_image"] > 0 and r["compute_ms"] > 0, r
        assert r["compute_ms"] <= r["ms_per_image"] * 1.0001, r
    # Splits of different global batches are refused by name, as are malformed ones.
    bad = run(args, ["--splits", "2x4,4x4"])
    assert bad.returncode != 0 and "different global batches [8, 16]" in bad.stderr, bad.stderr
    bad = run(args, ["--splits", "2x4,eight"])
    assert bad.returncode != 0 and "'eight' is not RANKSxBATCH" in bad.stderr, bad.stderr
    # A failing aps_train run is reported with the split and its error.
    bad = run(args, ["--splits", "2x4", "--steps", "4", "--interval", "2", "--repeats", "1",
                     "--set", "optimizer.no_such_key=1"])
    assert bad.returncode != 0 and "2x4 failed" in bad.stderr and "no_such_key" in bad.stderr, bad.stderr
    print("sim_scale: ok")


if __name__ == "__main__":
    main()
