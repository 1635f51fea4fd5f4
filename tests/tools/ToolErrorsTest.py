#!/usr/bin/env python3
"""Every aps tool as a user meets it: usage errors exit 2 with '<tool>: error: ...', runtime
errors exit 1 naming the user's file or value (never aps's own source file), and
aps_formats quantize keeps one output line per input line.

    ToolErrorsTest.py --tool NAME=PATH [--tool NAME=PATH ...]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOLS = {}


def run(args, stdin=""):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def run_env(args, env):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    return p.returncode, p.stdout, p.stderr


class UsageErrors(unittest.TestCase):
    def test_unknown_option_exits_2_in_the_tools_own_form(self):
        for name, path in sorted(TOOLS.items()):
            with self.subTest(tool=name):
                code, _, err = run([path, "--no-such-option"])
                self.assertEqual(code, 2, err)
                self.assertTrue(err.startswith(f"{name}: error: "), err)

    def test_help_and_version_exit_0(self):
        for name, path in sorted(TOOLS.items()):
            with self.subTest(tool=name):
                code, out, err = run([path, "--help"])
                self.assertEqual(code, 0, err)
                self.assertIn("Usage", out + err)
                code, out, err = run([path, "--version"])
                self.assertEqual(code, 0, err)
                self.assertIn("(aps)", out)

    def test_missing_required_argument_exits_2(self):
        code, _, err = run([TOOLS["aps_train"]])
        self.assertEqual(code, 2, err)
        self.assertIn("aps_train: error: ", err)
        self.assertIn("--config", err)

    def test_empty_resume_is_a_usage_error(self):
        code, _, err = run([TOOLS["aps_train"], "--config", "x.yaml", "--resume", ""])
        self.assertEqual(code, 2, err)
        self.assertIn("--resume: needs a checkpoint file", err)


class HugePages(unittest.TestCase):
    """Every tool runs with glibc's huge pages asked for (it re-executes itself once with the
    tunable set) unless APS_HUGE_PAGES=0; a tunable the user set is kept."""

    def info(self, **env):
        code, out, err = run_env([TOOLS["aps_info"]], env)
        self.assertEqual(code, 0, err)
        return next(line for line in out.splitlines() if line.startswith("huge pages: "))

    def test_asked_by_default_and_not_with_aps_huge_pages_0(self):
        self.assertIn("huge pages: asked of glibc", self.info())
        self.assertIn("huge pages: not asked", self.info(APS_HUGE_PAGES="0"))

    def test_the_users_tunables_are_kept(self):
        line = self.info(GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
        self.assertIn("asked of glibc (GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1;", line)
        # A user who set the tunable themselves is not overruled.
        self.assertIn("not asked (GLIBC_TUNABLES=glibc.malloc.hugetlb=0;", self.info(GLIBC_TUNABLES="glibc.malloc.hugetlb=0"))


class RuntimeErrors(unittest.TestCase):
    SOURCE = re.compile(r"\b(framework|precision|comm|data|models|tools)/[\w/]+\.(cpp|h):\d+")

    def check(self, args, fragment, stdin=""):
        code, _, err = run(args, stdin)
        self.assertEqual(code, 1, err)
        name = os.path.basename(args[0])
        self.assertTrue(err.startswith(f"{name}: error: "), err)
        self.assertIn(fragment, err)
        self.assertIsNone(self.SOURCE.search(err), "the message names aps's source: " + err)

    def test_messages_name_the_users_input_not_aps_source(self):
        self.check([TOOLS["aps_formats"], "info", "e9m9"], "e9m9")
        self.check([TOOLS["aps_formats"], "info", "{exponent_bits: 9, mantissa_bits: 2}"], "exponent_bits")
        self.check([TOOLS["aps_train"], "--config", "/nonexistent/exp.yaml"], "/nonexistent/exp.yaml")
        with tempfile.TemporaryDirectory() as d:
            self.check([TOOLS["aps_train"], "--config", d], "is a directory")
            empty = os.path.join(d, "empty.yaml")
            open(empty, "w").close()
            self.check([TOOLS["aps_train"], "--config", empty], "the config is empty")
            config = os.path.join(d, "c.yaml")
            with open(config, "w") as f:
                f.write("seed: 1\n")
            self.check([TOOLS["aps_train"], "--config", config, "--set", "optimizer.lr="], "has no value")
            self.check([TOOLS["aps_train"], "--config", config, "--set", "optimizer.lr=fast", "--print-config"],
                       "--set optimizer.lr=fast")
        if "aps_bench_ops" in TOOLS:
            self.check([TOOLS["aps_bench_ops"], "--input", "3x32"], "--input '3x32' is not CxHxW")
            self.check([TOOLS["aps_bench_ops"], "--input", "3x32x16"], "--input '3x32x16'")
        if "aps_safetensors" in TOOLS:
            code, _, err = run([TOOLS["aps_safetensors"], "/nonexistent/w.safetensors"])
            self.assertIn(code, (1, 2), err)
            self.assertIsNone(self.SOURCE.search(err), err)


class Diverged(unittest.TestCase):
    def test_the_final_line_says_a_run_diverged(self):
        if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
            if os.environ.get("APS_TESTS_REQUIRE_DATA") == "1":
                self.fail("Fashion-MNIST is not installed but APS_TESTS_REQUIRE_DATA=1")
            self.skipTest("Fashion-MNIST not installed")
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "div.yaml")
            with open(config, "w") as f:
                f.write("model: {name: resnet20, num_classes: 10, in_channels: 1}\n"
                        "data: {dataset: fashion_mnist, batch_size: 16, workers: 1, train_samples: 128,"
                        " test_samples: 64}\n"
                        "comm: {backend: sim, world_size: 1}\n"
                        "optimizer: {name: sgd, lr: 100000.0, momentum: 0.9}\n"
                        "schedule: {name: constant}\nepochs: 2\nthreads: 1\n"
                        "logging: {level: error, progress: false}\n")
            code, out, err = run([TOOLS["aps_train"], "--config", config])
            self.assertEqual(code, 0, err)
            last = out.strip().splitlines()[-1]
            self.assertTrue(last.startswith("final: test top-1"), last)
            self.assertIn("DIVERGED", last)
            self.assertNotIn("loss -", last)


class Quantize(unittest.TestCase):
    def quantize(self, text, *extra):
        code, out, err = run([TOOLS["aps_formats"], "quantize", "--format", "e2m1", *extra], text)
        self.assertEqual(code, 0, err)
        return out

    def test_one_output_line_per_input_line_blank_lines_included(self):
        out = self.quantize("1.1\n\n  \n2.9\n")
        self.assertEqual(out, "1\n\n\n3\n")

    def test_stochastic_seeds_follow_the_input_line_not_the_count_of_numbers(self):
        for seed in range(8):
            a = self.quantize("\n\n1.2\n", "--rounding", "stochastic", "--seed", str(seed)).split("\n")
            b = self.quantize("0\n0\n1.2\n", "--rounding", "stochastic", "--seed", str(seed)).split("\n")
            self.assertEqual(a[2], b[2], f"seed {seed}")

    def test_out_of_range_input_is_an_error_and_nan_has_no_sign(self):
        code, _, err = run([TOOLS["aps_formats"], "quantize", "--format", "e4m3"], "1\n-1e999\n")
        self.assertEqual(code, 1, err)
        self.assertIn("line 2: '-1e999' is outside the float range", err)
        code, out, err = run([TOOLS["aps_formats"], "quantize", "--format", "fp16"], "-nan\nnan\ninf\n-inf\n")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "nan\nnan\ninf\n-inf\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", action="append", default=[])
    args, rest = parser.parse_known_args()
    for spec in args.tool:
        name, path = spec.split("=", 1)
        TOOLS[name] = path
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
