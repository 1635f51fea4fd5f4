#!/usr/bin/env python3
"""tools/reproduce/reproduce.py's progress bar over the sweep: its ETA (the mean time per
expected step of the finished runs), the bar on a terminal, and nothing of it in a log; the
results store that lets a sweep run in parts (a stored run is not rerun, and the report is
written from the store alone); the paired differences' 90% confidence intervals. A fake
aps_train stands in for the real one (a few seconds in all).

    ReproduceProgressTest.py --work DIR
"""

import argparse
import io
import json
import os
import pty
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "reproduce" / "reproduce.py"
sys.path.insert(0, str(SCRIPT.parent))
import reproduce  # noqa: E402

WORK = None

# Writes the records the report reads into --set logging.metrics_file=..., after a short nap.
FAKE_APS_TRAIN = """#!/usr/bin/env python3
import json, sys, time
args = sys.argv[1:]
sets = dict(a.split("=", 1) for a in args[args.index("--set") + 1::2] if "=" in a)
time.sleep(0.3)
with open(sets["logging.metrics_file"], "w") as f:
    f.write(json.dumps({"type": "formats", "step": 0, "layers": []}) + "\\n")
    f.write(json.dumps({"type": "train", "epoch": 0, "step": 2, "loss": 2.0, "lr": 0.1, "images_per_s": 100.0,
                        "comm_s": 0.02, "exposed_comm_s": 0.01, "bytes_sent_per_step": 1000, "layers": []}) + "\\n")
    f.write(json.dumps({"type": "final", "epoch": 1, "step": 2, "top1": 0.5, "top5": 0.9, "loss": 1.5, "miou": 0.0,
                        "pixel_accuracy": 0.0, "diverged": False, "skipped_steps": 0, "seconds": 0.1}) + "\\n")
"""


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class Run:
    def __init__(self, id_, steps):
        self.id, self.expected_steps = id_, steps


class Eta(unittest.TestCase):
    def test_none_before_a_run_finished(self):
        self.assertIsNone(reproduce.sweep_eta([], [10, 10], [], 1))

    def test_weighted_by_expected_steps(self):
        # 10 s for 100 steps: 0.1 s per step; 300 steps to go on one lane.
        self.assertAlmostEqual(reproduce.sweep_eta([(10.0, 100)], [100, 200], [], 1), 30.0)
        # A run half done (5 s of its 10) and one not started, two side by side.
        self.assertAlmostEqual(reproduce.sweep_eta([(10.0, 100)], [100], [(5.0, 100)], 2), 7.5)
        self.assertAlmostEqual(reproduce.sweep_eta([(10.0, 100)], [], [], 2), 0.0)

    def test_expected_steps_from_the_runs_keys(self):
        self.assertEqual(reproduce.expected_steps({"epochs": 2, "data.train_samples": 384}, 128), 6)
        self.assertEqual(reproduce.expected_steps({"epochs": 2, "data.train_samples": 384, "max_steps": 4}, 128), 4)
        self.assertIsNone(reproduce.expected_steps({"epochs": 2}, 128))


class Bar(unittest.TestCase):
    def test_drawn_on_a_terminal(self):
        out = FakeTerminal()
        progress = reproduce.SweepProgress([Run("a", 100), Run("b", 300)], 1, stream=out)
        progress.started(Run("a", 100))
        progress.finished(Run("a", 100), "ok", 10.0)
        progress.draw()
        self.assertIn("1/2 runs", out.getvalue())
        self.assertIn("ETA 0:00:30", out.getvalue())  # 300 steps at 0.1 s
        progress.clear()
        self.assertTrue(out.getvalue().endswith("\r\033[K"))

    def test_nothing_in_a_log(self):
        out = io.StringIO()
        progress = reproduce.SweepProgress([Run("a", 100)], 1, stream=out)
        progress.finished(Run("a", 100), "ok", 1.0)
        progress.draw()
        progress.clear()
        self.assertEqual(out.getvalue(), "")


class PairedInterval(unittest.TestCase):
    def test_students_t_on_the_paired_differences(self):
        mean, half = reproduce.paired_interval([1.0, 2.0, 3.0])
        self.assertEqual(mean, 2.0)
        self.assertAlmostEqual(half, 2.920 * 1.0 / 3 ** 0.5)  # t(0.95, 2 dof) * sd / sqrt(n)
        self.assertEqual(reproduce.paired_interval([0.5]), (0.5, None))  # one pair: no interval
        mean, half = reproduce.paired_interval([0.0, 1.0] * 20)  # 39 dof: the normal quantile
        self.assertAlmostEqual(half, 1.645 * reproduce.statistics.stdev([0.0, 1.0] * 20) / 40 ** 0.5)

    def test_pairs_only_seeds_both_rows_finished(self):
        def run(variant, seed, top1, status="ok"):
            return {"setting": "r8", "variant": variant, "seed": seed, "top1": top1, "status": status}
        data = {"runs": [run("fp32", 1, 0.90), run("fp32", 2, 0.91), run("fp32", 3, 0.5, "failed"),
                         run("e3m0", 1, 0.88), run("e3m0", 2, 0.90), run("e3m0", 3, 0.89), run("e3m0", 4, 0.80)]}
        diffs = reproduce.paired_differences(data, "r8", "e3m0", "top1")
        self.assertEqual(len(diffs), 2)
        self.assertAlmostEqual(diffs[0], -2.0)
        self.assertAlmostEqual(diffs[1], -1.0)


class FakeSweep:
    """reproduce.py end to end with the fake aps_train (--quick, three runs, no plots)."""

    def sweep(self, name, terminal, fresh=True, extra=()):
        work = WORK / name
        if fresh:
            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        fake = work / "aps_train"
        fake.write_text(FAKE_APS_TRAIN)
        fake.chmod(0o755)
        cmd = [sys.executable, str(SCRIPT), "--quick", "--sweep", str(SCRIPT.parent / "sweep.json"), "--only",
               "r8-fp32-s1,r8-e4m3-s1,r8-e4m3_aps-s1", "--no-plots", "--out", str(work / "out"), "--docs",
               str(work / "docs"), "--aps-train", str(fake), *extra]
        stdout = open(work / "stdout.log", "w")
        if terminal:
            leader, follower = pty.openpty()
            p = subprocess.Popen(cmd, stdout=stdout, stderr=follower, stdin=subprocess.DEVNULL)
            os.close(follower)
            seen = b""
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            os.close(leader)
            rc = p.wait(timeout=120)
            err = seen.decode(errors="replace")
        else:
            with open(work / "stderr.log", "w") as errfile:
                rc = subprocess.call(cmd, stdout=stdout, stderr=errfile, stdin=subprocess.DEVNULL, timeout=120)
            err = (work / "stderr.log").read_text()
        stdout.close()
        return rc, (work / "stdout.log").read_text(), err


class Sweep(FakeSweep, unittest.TestCase):
    """stderr a terminal, then a file."""

    def test_bar_on_a_terminal(self):
        rc, out, err = self.sweep("tty", terminal=True)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("3/3 runs", err)
        self.assertIn("ETA", err)
        self.assertNotIn("ETA", out)  # the run lines on stdout stay clean
        self.assertIn("[3/3] r8-", out)

    def test_no_bar_in_a_log(self):
        rc, out, err = self.sweep("log", terminal=False)
        self.assertEqual(rc, 0, out + err)
        self.assertNotIn("ETA", err + out)
        self.assertNotIn("\r", err + out)
        self.assertIn("[3/3] r8-", out)


class ResultsStore(FakeSweep, unittest.TestCase):
    """A sweep in parts: what one machine finished is committed as results/runs/ID.json; another
    machine, without the metrics files, neither reruns those runs nor loses them from the report."""

    def test_a_stored_run_is_not_rerun_and_reaches_the_report(self):
        rc, out, err = self.sweep("store", terminal=False)
        self.assertEqual(rc, 0, out + err)
        store = WORK / "store" / "docs" / "results" / "runs"
        self.assertEqual(sorted(p.name for p in store.iterdir()),
                         ["r8-e4m3-s1.json", "r8-e4m3_aps-s1.json", "r8-fp32-s1.json"])
        # Another machine: the store only (no metrics files); the fake aps_train would fail if called.
        shutil.rmtree(WORK / "store" / "out")
        (WORK / "store" / "aps_train").write_text("#!/bin/sh\nexit 3\n")
        rc, out, err = self.sweep("store", terminal=False, fresh=False)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out.count(": skipped"), 3, out)
        report = (WORK / "store" / "docs" / "RESULTS.md").read_text()
        self.assertIn("| e4m3 + APS | 50.00 |", report)
        rc, out, err = self.sweep("store", terminal=False, fresh=False, extra=("--report-only",))
        self.assertEqual(rc, 0, out + err)
        self.assertIn("| e4m3 + APS | 50.00 |", (WORK / "store" / "docs" / "RESULTS.md").read_text())

    def test_a_stored_run_of_another_configuration_is_rerun(self):
        rc, out, err = self.sweep("stale", terminal=False)
        self.assertEqual(rc, 0, out + err)
        shutil.rmtree(WORK / "stale" / "out")
        stored = WORK / "stale" / "docs" / "results" / "runs" / "r8-e4m3-s1.json"
        summary = json.loads(stored.read_text())
        self.assertEqual(summary["config"]["set"]["precision.format"], "e4m3")
        summary["config"]["set"]["epochs"] = 99  # as if the sweep file had changed since
        stored.write_text(json.dumps(summary))
        rc, out, err = self.sweep("stale", terminal=False, fresh=False)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out.count(": skipped"), 2, out)
        self.assertIn("r8-e4m3-s1: ok", out)
        self.assertNotEqual(json.loads(stored.read_text())["config"]["set"]["epochs"], 99)  # stored anew


def main():
    global WORK
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True, help="scratch directory")
    args, rest = parser.parse_known_args()
    WORK = Path(args.work)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
