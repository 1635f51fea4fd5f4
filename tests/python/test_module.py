"""The Python module aps against the C++ tool aps_formats: the same bits.

Run by ctest with PYTHONPATH=build/python and APS_FORMATS=<aps_formats binary>.
"""
import os
import subprocess
import unittest

import numpy as np

import aps

TOOL = os.environ.get("APS_FORMATS", "build/bin/aps_formats")
CUSTOM = {"exponent_bits": 3, "mantissa_bits": 2, "bias": 2, "subnormals": False}
CUSTOM_YAML = "{exponent_bits: 3, mantissa_bits: 2, bias: 2, subnormals: false}"


def tool(*args, stdin=None):
    return subprocess.run([TOOL, *args], input=stdin, capture_output=True, text=True, check=True).stdout


def inputs():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-8, 5, 300),
                        [0.0, -0.0, 448.0, 449.0, 464.0, 57344.0, 1e-7, -3.0e38, np.inf, -np.inf]])
    return x.astype(np.float32)


def same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(
        a.view(np.uint32)[~np.isnan(a)], b.view(np.uint32)[~np.isnan(b)])


class QuantizeLikeTheTool(unittest.TestCase):
    def check(self, fmt, tool_fmt, rounding, seed):
        x = inputs()
        text = "\n".join("%.9g" % v if np.isfinite(v) else ("inf" if v > 0 else "-inf") for v in x) + "\n"
        lines = tool("quantize", "--format", tool_fmt, "--rounding", rounding, "--seed", str(seed), stdin=text)
        expected = np.array([float(v) for v in lines.split()], np.float32)
        got = aps.quantize(x, fmt, rounding, seed=seed)
        self.assertEqual(got.dtype, np.float32)
        self.assertTrue(same_bits(got, expected), f"{tool_fmt} {rounding} seed {seed}")

    def test_presets_every_rounding(self):
        for name in aps.PRESETS:
            for rounding in aps.rounding_modes():
                with self.subTest(format=name, rounding=rounding):
                    self.check(name, name, rounding, 11)

    def test_custom_format_from_a_dict(self):
        for rounding in aps.rounding_modes():
            self.check(CUSTOM, CUSTOM_YAML, rounding, 3)

    def test_shape_kept_and_input_untouched(self):
        x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
        before = x.copy()
        y = aps.quantize(x, "e2m1")
        self.assertEqual(y.shape, (3, 4))
        self.assertTrue(np.array_equal(x, before))
        self.assertTrue(same_bits(y.ravel(), aps.quantize(x.ravel(), "e2m1")))


class FormatsLikeTheTool(unittest.TestCase):
    def test_info(self):
        for name in aps.PRESETS:
            fields = dict(line.split(": ", 1) for line in tool("info", name).splitlines())
            info = aps.info(name)
            self.assertEqual(fields["format"], info["format"])
            for key in ("bits", "bias", "finite_values"):
                self.assertEqual(int(fields[key]), info[key], f"{name} {key}")
            for key in ("max", "min_normal", "min_subnormal", "epsilon"):
                self.assertEqual(np.float32(float(fields[key])), np.float32(info[key]), f"{name} {key}")
            self.assertEqual(fields["inf"] == "yes", info["inf"])
            self.assertEqual(fields["nan"] == "yes", info["nan"])

    def test_tables(self):
        for name in ("e4m3", "e5m2", "e3m0", "e2m1", "e4m3_ieee"):
            values = [float(line.split()[2]) for line in tool("table", name).splitlines()]
            self.assertTrue(same_bits(aps.Format(name).values(), np.array(values, np.float32)), name)

    def test_format_fields(self):
        f = aps.Format(CUSTOM)
        self.assertEqual((f.exponent_bits, f.mantissa_bits, f.bias, f.subnormals), (3, 2, 2, False))
        self.assertEqual(aps.Format("e4m3").max_value, 448.0)
        self.assertEqual(aps.Format("e4m3"), aps.Format({"preset": "e4m3"}))


class Codecs(unittest.TestCase):
    def test_encode_decode_is_quantize(self):
        x = inputs()[np.isfinite(inputs())]
        for codec, fmt in (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("fp16", "fp16"), ("bf16", "bf16"), ("e2m1", "e2m1")):
            data = aps.encode(x, codec)
            self.assertEqual(len(data), aps.encoded_bytes(codec, x.size))
            self.assertTrue(same_bits(aps.decode(data, codec, x.size), aps.quantize(x, fmt)), codec)
        self.assertEqual(aps.encoded_bytes("e4m3", 1000), 1000)
        self.assertEqual(aps.encoded_bytes("e2m1", 1000), 500)

    def test_stochastic_encode_uses_the_seed(self):
        x = np.full(1000, 0.3, np.float32)
        a = aps.decode(aps.encode(x, "e4m3:stochastic", seed=1), "e4m3", 1000)
        self.assertTrue(same_bits(a, aps.quantize(x, "e4m3", "stochastic", seed=1)))
        b = aps.decode(aps.encode(x, "e4m3:stochastic", seed=2), "e4m3", 1000)
        self.assertFalse(np.array_equal(a, b))
        self.assertAlmostEqual(float(a.mean()), 0.3, delta=0.01)

    def test_dettmers_round_trip(self):
        x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
        y = aps.decode(aps.encode(x, "dettmers_dynamic"), "dettmers_dynamic", x.size)
        self.assertLess(np.abs(y - x).max() / np.abs(x).max(), 0.05)


class Aps(unittest.TestCase):
    def test_shifts_fill_the_format_with_headroom(self):
        layers = [np.array([0.01, -0.2], np.float32), np.zeros(3, np.float32), np.array([3000.0], np.float32)]
        # ceil(log2(4 * 0.2)) = 0 -> 8 - 0; all-zero layer -> 0; ceil(log2(12000)) = 14 -> 8 - 14.
        self.assertEqual(aps.aps_shifts(layers, "e4m3", world_size=4), [8, 0, -6])
        self.assertEqual(aps.aps_shifts(layers, "e4m3", world_size=4, mode="none"), [0, 0, 0])
        y = aps.scale_by_power_of_two(layers[0], 8)
        self.assertTrue(np.array_equal(y, layers[0] * 256))


class BlockScaling(unittest.TestCase):
    def reference(self, x, element, block):
        """The definition: X = 2^(floor(log2(amax)) - emax) per block, elements rounded (aps.quantize,
        checked against the tool above) and saturated."""
        f = aps.Format(element)
        emax = int(np.floor(np.log2(f.max_value)))
        out = np.empty_like(x)
        for b in range(0, x.size, block):
            v = x[b:b + block].astype(np.float64)
            amax = np.abs(v).max()
            e = 0 if amax == 0 else int(np.clip(np.floor(np.log2(amax)) - emax, -127, 127))
            scaled = (v * 2.0 ** -e).astype(np.float32)
            q = aps.quantize(scaled, {"preset": element, "overflow": "saturate"})
            out[b:b + block] = (q.astype(np.float64) * 2.0 ** e).astype(np.float32)
        return out

    def test_block_quantize_is_the_definition(self):
        rng = np.random.default_rng(3)
        x = (rng.standard_normal(1000) * 10.0 ** rng.integers(-6, 6, 1000).repeat(1)).astype(np.float32)
        for element in ("e2m1", "e4m3", "e3m2", "e2m3", "e5m2"):
            self.assertTrue(same_bits(aps.block_quantize(x, element, 32), self.reference(x, element, 32)), element)

    def test_mx_codecs_carry_the_scales(self):
        x = np.random.default_rng(4).standard_normal(100).astype(np.float32)
        data = aps.encode(x, "mxfp4")
        self.assertEqual(len(data), 4 + 50)  # 4 E8M0 scale bytes, then 100 nibbles
        self.assertTrue(same_bits(aps.decode(data, "mxfp4", 100), aps.block_quantize(x, "e2m1", 32)))
        self.assertTrue(same_bits(aps.decode(aps.encode(x, "e3m0/block16"), "e3m0/block16", 100),
                                  aps.block_quantize(x, "e3m0", 16)))
        for name in aps.MX_TYPES:
            self.assertEqual(aps.decode(aps.encode(x, name), name, 100).shape, (100,))


class Errors(unittest.TestCase):
    def test_bad_input_names_the_value(self):
        with self.assertRaisesRegex(aps.Error, "e9m9"):
            aps.quantize(np.ones(2, np.float32), "e9m9")
        with self.assertRaisesRegex(aps.Error, "mantissa_bits"):
            aps.Format({"exponent_bits": 4})
        with self.assertRaisesRegex(aps.Error, "sideways"):
            aps.quantize(np.ones(2, np.float32), "e4m3", "sideways")
        with self.assertRaisesRegex(aps.Error, "3 bytes"):
            aps.decode(b"abc", "fp16", 2)
        with self.assertRaises(TypeError):
            aps.quantize(np.ones(2, np.float32), 3.5)


if __name__ == "__main__":
    unittest.main()
