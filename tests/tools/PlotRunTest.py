#!/usr/bin/env python3
"""aps_plot (tools/plot_run.py) and aps_train's end-of-run picture, as a user meets them: a
real short aps_train run leaves <metrics stem>.png beside its metrics file; aps_plot draws one
run and two overlaid runs into PNGs; a bad metrics file exits 1 naming the file (and line);
usage errors exit 2, a python3 without matplotlib 3; a failing or disabled plot script never
fails the run. The first run also has the fidelity probe (--set precision.probe_interval=2):
"probe" records at steps 0 and 2, drawn in the picture's probe row.

    PlotRunTest.py --aps-train build/bin/aps_train --aps-plot build/bin/aps_plot --work DIR
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_SCRIPT = ROOT / "tools" / "plot_run.py"
ARGS = None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train(metrics, env_plot=None, extra=()):
    """A 4-step aps_train run writing `metrics`; env_plot: APS_PLOT's value (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "APS_PLOT"}
    env.setdefault("OMP_WAIT_POLICY", "passive")
    if env_plot is not None:
        env["APS_PLOT"] = env_plot
    cmd = [ARGS.aps_train, "--config", str(ROOT / "configs" / "fmnist_resnet20_e4m3_aps.yaml"),
           "--set", "max_steps=4", "--set", "data.train_samples=512", "--set", "data.test_samples=128",
           "--set", "logging.interval=2", "--set", "logging.progress=false", "--set", "threads=1",
           "--set", f"logging.metrics_file={metrics}", "--set", f"checkpoint.dir={metrics.parent / 'ckpt'}", *extra]
    start = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    print(f"aps_train {metrics.name}: exit {p.returncode} in {time.monotonic() - start:.1f} s", flush=True)
    return p


def plot(*args, python=None):
    cmd = ([python, str(SOURCE_SCRIPT)] if python else [ARGS.aps_plot]) + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def assert_png(test, path):
    test.assertTrue(path.is_file(), f"{path} was not written")
    data = path.read_bytes()
    test.assertGreater(len(data), 1000, f"{path} is (nearly) empty")
    test.assertEqual(data[:8], PNG_MAGIC, f"{path} is not a PNG")


class PlotRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        work = Path(ARGS.work)
        shutil.rmtree(work, ignore_errors=True)
        cls.work = work
        # The end-of-run picture: aps_plot beside aps_train (APS_PLOT unset); with the fidelity
        # probe every 2 steps, so the picture has its row.
        cls.first = work / "run1" / "e4m3_aps.jsonl"
        cls.first.parent.mkdir(parents=True)
        cls.first_run = train(cls.first, extra=["--set", "precision.probe_interval=2"])
        # A second run whose plot script fails: the run still succeeds, with a warning.
        failing = work / "failing_plot.py"
        failing.write_text("import sys\nprint('plot script: broken on purpose', file=sys.stderr)\nsys.exit(1)\n")
        cls.second = work / "run2" / "e5m2_aps.jsonl"
        cls.second.parent.mkdir(parents=True)
        cls.second_run = train(cls.second, env_plot=str(failing), extra=["--set", "precision.format=e5m2"])

    def test_aps_train_draws_its_picture_beside_the_metrics(self):
        self.assertEqual(self.first_run.returncode, 0, self.first_run.stderr)
        assert_png(self, self.first.with_suffix(".png"))
        self.assertIn(f"run plot {self.first.with_suffix('.png')}", self.first_run.stderr)

    def test_probe_records_every_second_step(self):
        # aps_train --set precision.probe_interval=2: "probe" records at steps 0 and 2 of 4, none
        # in the run without it; the final record carries the run's medians.
        import json
        records = [json.loads(line) for line in self.first.read_text().splitlines()]
        self.assertEqual([r["step"] for r in records if r["type"] == "probe"], [0, 2])
        final = next(r for r in records if r["type"] == "final")
        self.assertEqual(final["probe"]["steps"], 2)
        self.assertGreater(final["probe"]["median_cosine"], 0.9)
        self.assertIn("fidelity probe over 2 steps", self.first_run.stderr)
        self.assertFalse(any('"type":"probe"' in line for line in self.second.read_text().splitlines()))

    def test_a_failing_plot_script_only_warns(self):
        self.assertEqual(self.second_run.returncode, 0, self.second_run.stderr)
        self.assertFalse(self.second.with_suffix(".png").exists())
        self.assertIn("run plot", self.second_run.stderr)
        self.assertIn("broken on purpose", self.second_run.stderr)
        self.assertTrue(any(r'"type":"final"' in line for line in self.second.read_text().splitlines()))

    def test_one_run(self):
        out = self.work / "one.png"
        p = plot(self.first, "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        assert_png(self, out)

    def test_two_runs_overlaid_from_the_source_script(self):
        out = self.work / "two.png"
        p = plot(self.first, self.second, "-o", out, "--labels", "e4m3,e5m2", python=sys.executable)
        self.assertEqual(p.returncode, 0, p.stderr)
        assert_png(self, out)

    def test_a_run_without_intervals_or_layers_still_draws(self):
        # Only the first and last records (a fp32 run logs no layers; no interval ended): the
        # empty panels say so instead of failing.
        lines = self.first.read_text().splitlines(keepends=True)
        sparse = self.work / "sparse.jsonl"
        sparse.write_text(lines[0] + lines[-1])
        out = self.work / "sparse.png"
        p = plot(sparse, "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        assert_png(self, out)

    def test_missing_file_exits_1_naming_it(self):
        missing = self.work / "no-such-run.jsonl"
        p = plot(missing, "-o", self.work / "x.png")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"aps_plot: error: {missing}: cannot read", p.stderr)
        self.assertFalse((self.work / "x.png").exists())

    def test_truncated_line_exits_1_naming_file_and_line(self):
        lines = self.first.read_text().splitlines(keepends=True)
        torn = self.work / "torn.jsonl"
        torn.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # a run killed mid-write
        p = plot(torn, "-o", self.work / "torn.png")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{torn}:3: not a JSON record (truncated", p.stderr)
        self.assertFalse((self.work / "torn.png").exists())

    def test_usage_errors_exit_2(self):
        p = plot(self.first, self.second)  # several files and no -o
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertTrue(p.stderr.startswith("aps_plot: error: "), p.stderr)
        self.assertIn("-o OUT.png is needed", p.stderr)
        p = plot(self.first, "-o", self.work / "x.png", "--labels", "a,b")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--labels has 2 labels for 1 metrics files", p.stderr)

    @unittest.skipUnless(os.path.exists("/usr/bin/python3"), "no /usr/bin/python3")
    def test_without_matplotlib_exits_3(self):
        # -S: no site packages, so no matplotlib (the metrics reader is the standard library's).
        cmd = ["/usr/bin/python3", "-S", str(SOURCE_SCRIPT), str(self.first), "-o", str(self.work / "nompl.png")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("matplotlib is missing", p.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--aps-train", required=True)
    parser.add_argument("--aps-plot", required=True, help="build/bin/aps_plot")
    parser.add_argument("--work", required=True, help="scratch directory (emptied first)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
