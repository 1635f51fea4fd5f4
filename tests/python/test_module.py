"""The Python module aps against the C++ tool aps_formats: the same bits.

Run by ctest with PYTHONPATH=build/python and APS_FORMATS=<aps_formats binary>.
"""
import ast
import contextlib
import io
import os
import re
import subprocess
import unittest

import numpy as np

import aps

try:
    import torch
except ImportError:  # the NumPy tests run without PyTorch
    torch = None

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

    def test_dettmers_static_is_the_tools_code_book(self):
        # Dettmers' static tree: each byte after a block's fp32 absmax is the index of the nearest
        # of aps_formats' 256 codes to x / absmax, and decodes to that code times the absmax.
        book = np.array([float(line.split()[1]) for line in tool("table", "dettmers_static").splitlines()],
                        np.float32)
        self.assertEqual(book.size, 256)
        x = np.random.default_rng(2).uniform(-3.0, 3.0, 1000).astype(np.float32)
        for codec, block in (("dettmers_static", 1000), ("dettmers_static/block250", 250)):
            data = bytes(aps.encode(x, codec))
            self.assertEqual(len(data), aps.encoded_bytes(codec, x.size))
            self.assertEqual(len(data), x.size + 4 * (x.size // block))
            y = aps.decode(data, codec, x.size)
            for b in range(x.size // block):
                head = b * (block + 4)
                absmax = np.frombuffer(data[head:head + 4], np.float32)[0]
                self.assertEqual(absmax, np.abs(x[b * block:(b + 1) * block]).max())
                codes = np.frombuffer(data[head + 4:head + 4 + block], np.uint8)
                v = x[b * block:(b + 1) * block].astype(np.float64) / absmax
                chosen = np.abs(book[codes].astype(np.float64) - v)
                best = np.abs(book[None, :].astype(np.float64) - v[:, None]).min(axis=1)
                self.assertTrue(np.all(chosen <= best + 1e-7), codec)
                self.assertTrue(same_bits(y[b * block:(b + 1) * block], book[codes] * absmax), codec)
            self.assertLess(np.abs(y - x).max() / np.abs(x).max(), 0.03)  # half the widest gap, 0.9 / 32


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

    def test_mx_names_point_to_block_quantize(self):
        for name, element in aps.MX_ELEMENTS.items():
            with self.assertRaisesRegex(aps.Error, rf"'{name}' is a block-scaled codec.*"
                                                   rf"aps\.block_quantize\(x, '{element}', 32\).*aps\.encode\(x, '{name}'\)"):
                aps.quantize(np.ones(2, np.float32), name)
        with self.assertRaisesRegex(aps.Error, r"block_quantize\(x, 'e3m0', 16\)"):
            aps.Format("e3m0/block16")
        for name in ("dettmers_dynamic", "dettmers_static"):
            with self.assertRaisesRegex(aps.Error, "Dettmers"):
                aps.quantize(np.ones(2, np.float32), name)
        with self.assertRaisesRegex(aps.Error, "rounding='stochastic'"):
            aps.quantize(np.ones(2, np.float32), "e4m3:stochastic")

    def test_bad_dtypes_name_the_argument(self):
        with self.assertRaisesRegex(TypeError, "aps.quantize: x .*complex"):
            aps.quantize(np.ones(2, np.complex64), "e4m3")
        with self.assertRaisesRegex(TypeError, "aps.block_quantize: x .*dtype <U1"):
            aps.block_quantize(np.array(["a"]), "e4m3")
        with self.assertRaisesRegex(TypeError, r"aps.aps_shifts: layers\[1\]"):
            aps.aps_shifts([np.ones(2, np.float32), np.ones(2, np.complex64)], "e4m3")
        with self.assertRaisesRegex(TypeError, "aps.decode: data must be a uint8 array, not dtype float32"):
            aps.decode(np.ones(2, np.float32), "e4m3", 8)
        with self.assertRaisesRegex(TypeError, "aps.decode: data must be a contiguous bytes-like"):
            aps.decode(12, "e4m3", 8)


class NumPyKinds(unittest.TestCase):
    def test_float_dtypes_are_kept(self):
        x = inputs()[:64]
        expected = aps.quantize(x, "e4m3")
        for dtype in (np.float16, np.float64):
            y = aps.quantize(x.astype(dtype), "e4m3")
            self.assertEqual(y.dtype, dtype)
            # Computed on x.astype(dtype) in float32, then cast back.
            self.assertTrue(same_bits(y.astype(np.float32),
                                      aps.quantize(x.astype(dtype).astype(np.float32), "e4m3").astype(dtype)))
        self.assertTrue(same_bits(aps.quantize(x.astype(np.float64), "e4m3"), expected))
        self.assertEqual(aps.quantize([0.3, 1.7], "e4m3").dtype, np.float32)
        self.assertEqual(aps.quantize(np.arange(4), "e4m3").dtype, np.float32)

    def test_non_contiguous(self):
        x = np.random.default_rng(2).standard_normal((8, 6)).astype(np.float32)
        view = x[::2, 1::2]
        self.assertFalse(view.flags.c_contiguous)
        self.assertTrue(same_bits(aps.quantize(view, "e5m2"), aps.quantize(view.copy(), "e5m2")))
        self.assertTrue(same_bits(aps.block_quantize(view.T, "e2m1", 4), aps.block_quantize(view.T.copy(), "e2m1", 4)))
        self.assertTrue(same_bits(aps.scale_by_power_of_two(view, 3), view * 8))
        self.assertEqual(aps.encode(view, "e4m3"), aps.encode(view.copy(), "e4m3"))


class Buffers(unittest.TestCase):
    def test_decode_takes_every_bytes_like(self):
        x = inputs()[np.isfinite(inputs())]
        for codec in ("e4m3", "mxfp4", "fp16"):
            data = aps.encode(x, codec)
            self.assertIsInstance(data, bytes)
            expected = aps.decode(data, codec, x.size)
            array = np.frombuffer(data, np.uint8)
            forms = [bytearray(data), memoryview(data), array, array.copy().view(np.int8),
                     np.concatenate([array, array]).reshape(2, -1)[0], np.repeat(array, 2)[::2]]
            if torch is not None:
                forms.append(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            for form in forms:
                with self.subTest(codec=codec, form=type(form).__name__):
                    got = aps.decode(form, codec, x.size)
                    if torch is not None and isinstance(form, torch.Tensor):
                        self.assertIsInstance(got, torch.Tensor)
                        got = got.numpy()
                    self.assertTrue(same_bits(got, expected))


class Version(unittest.TestCase):
    def test_version_is_the_cmake_projects(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with open(os.path.join(root, "CMakeLists.txt")) as f:
            version = re.search(r"project\(aps VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(aps.__version__, version)
        self.assertEqual(aps._aps.__version__, version)


class Stubs(unittest.TestCase):
    """python/aps/_aps.pyi against the module: the same names, the same parameters."""

    def stub(self):
        path = os.path.join(os.path.dirname(aps.__file__), "_aps.pyi")
        with open(path) as f:
            return ast.parse(f.read())

    @staticmethod
    def parameters(doc, name):
        # pybind11's first docstring line: name(a: T, b: T = default) -> R
        line = doc.splitlines()[0]
        inner = line[line.index("(") + 1: line.rindex(")")]
        names, depth, current = [], 0, ""
        for ch in inner + ",":
            if ch in "[(":
                depth += 1
            elif ch in "])":
                depth -= 1
            if ch == "," and depth == 0:
                if current.strip():
                    names.append(current.split(":")[0].strip())
                current = ""
            else:
                current += ch
        return [n for n in names if n != "self"]

    def test_every_name_and_parameter(self):
        tree = self.stub()
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        public = {n for n in dir(aps._aps) if not n.startswith("_")}
        self.assertEqual(public, set(functions) | set(classes))
        for name, node in functions.items():
            self.assertEqual([a.arg for a in node.args.args], self.parameters(getattr(aps._aps, name).__doc__, name),
                             name)
        for name, node in classes.items():
            cls = getattr(aps._aps, name)
            members = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
            public = {m for m in vars(cls) if not m.startswith("_")}
            self.assertEqual(public, {m for m in members if not m.startswith("_")}, name)
            for member, fn in members.items():
                if member.startswith("__") and member != "__init__" or not callable(getattr(cls, member)):
                    continue
                if isinstance(vars(cls).get(member), property):
                    continue
                doc = getattr(cls, member).__doc__
                if doc is None or not doc.startswith(member):
                    continue
                params = [a.arg for a in fn.args.args if a.arg != "self"]
                self.assertEqual(params, self.parameters(doc, member), f"{name}.{member}")

    def test_marker_next_to_the_stubs(self):
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(aps.__file__), "py.typed")))


@unittest.skipIf(torch is None, "PyTorch is not installed")
class TorchInTorchOut(unittest.TestCase):
    def x(self, shape=(6, 7)):
        g = torch.Generator().manual_seed(3)
        return torch.randn(*shape, generator=g) * 10

    def test_quantize_keeps_kind_shape_dtype(self):
        x = self.x()
        expected = aps.quantize(x.numpy(), "e4m3")
        y = aps.quantize(x, "e4m3")
        self.assertIsInstance(y, torch.Tensor)
        self.assertEqual((y.shape, y.dtype, y.device), (x.shape, x.dtype, x.device))
        self.assertTrue(same_bits(y.numpy(), expected))
        for dtype in (torch.bfloat16, torch.float16, torch.float64):
            with self.subTest(dtype=dtype):
                xd = x.to(dtype)
                yd = aps.quantize(xd, "e5m2", "stochastic", seed=4)
                self.assertEqual((yd.shape, yd.dtype), (x.shape, dtype))
                ref = aps.quantize(xd.float().numpy(), "e5m2", "stochastic", seed=4)
                self.assertTrue(torch.equal(yd, torch.from_numpy(ref).to(dtype)))

    def test_every_array_function(self):
        x = self.x((5, 13)).to(torch.bfloat16)
        ref = x.float().numpy()
        cases = {
            "block_quantize": (aps.block_quantize(x, "e2m1", 8), aps.block_quantize(ref, "e2m1", 8)),
            "scale_by_power_of_two": (aps.scale_by_power_of_two(x, -3), aps.scale_by_power_of_two(ref, -3)),
        }
        for name, (got, expected) in cases.items():
            with self.subTest(function=name):
                self.assertIsInstance(got, torch.Tensor)
                self.assertEqual((got.shape, got.dtype), (x.shape, x.dtype))
                self.assertTrue(torch.equal(got, torch.from_numpy(expected).to(x.dtype)))
        self.assertEqual(aps.aps_shifts([x, x * 1000], "e4m3", world_size=2), aps.aps_shifts([ref, ref * 1000], "e4m3",
                                                                                             world_size=2))
        data = aps.encode(x, "e4m3")
        self.assertIsInstance(data, torch.Tensor)
        self.assertEqual((data.dtype, data.numel()), (torch.uint8, x.numel()))
        self.assertEqual(data.numpy().tobytes(), aps.encode(ref, "e4m3"))
        y = aps.decode(data, "e4m3", x.numel())
        self.assertIsInstance(y, torch.Tensor)
        self.assertEqual(y.dtype, torch.float32)
        self.assertTrue(same_bits(y.numpy(), aps.quantize(ref, "e4m3").ravel()))

    def test_requires_grad_and_non_contiguous(self):
        x = self.x((8, 6)).requires_grad_()
        y = aps.quantize(x, "e4m3")
        self.assertFalse(y.requires_grad)
        self.assertTrue(torch.equal(y, aps.quantize(x.detach(), "e4m3")))
        view = x.detach().t()[::2]
        self.assertFalse(view.is_contiguous())
        self.assertTrue(torch.equal(aps.quantize(view, "e3m2"), aps.quantize(view.contiguous(), "e3m2")))
        self.assertTrue(torch.equal(aps.block_quantize(view, "e2m1", 4), aps.block_quantize(view.contiguous(), "e2m1", 4)))
        self.assertEqual(aps.quantize(x.detach(), "e4m3")[::2].shape, (4, 6))

    def test_input_untouched(self):
        x = self.x()
        before = x.clone()
        aps.quantize(x, "e2m1")
        aps.scale_by_power_of_two(x, 5)
        self.assertTrue(torch.equal(x, before))

    def test_integer_tensor_gives_float32(self):
        y = aps.quantize(torch.arange(10), "e2m1")
        self.assertEqual(y.dtype, torch.float32)
        self.assertEqual(y.tolist(), aps.quantize(np.arange(10, dtype=np.float32), "e2m1").tolist())

    def test_bad_dtypes_name_the_argument(self):
        with self.assertRaisesRegex(TypeError, "aps.quantize: x must be a real tensor.*complex64"):
            aps.quantize(torch.ones(2, dtype=torch.complex64), "e4m3")
        with self.assertRaisesRegex(TypeError, "aps.decode: data must be a uint8 tensor, not torch.float32"):
            aps.decode(torch.ones(2), "e4m3", 8)

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
    def test_device_kept(self):
        x = self.x().cuda().half()
        y = aps.quantize(x, "e4m3")
        self.assertEqual((y.device, y.dtype), (x.device, x.dtype))
        self.assertTrue(torch.equal(y.cpu(), aps.quantize(x.cpu(), "e4m3")))
        data = aps.encode(x, "mxfp4")
        self.assertEqual(data.device, x.device)
        self.assertEqual(aps.decode(data, "mxfp4", x.numel()).device, x.device)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class FakeQuantize(unittest.TestCase):
    def test_forward_is_quantize_backward_is_identity(self):
        import aps.torch
        g = torch.Generator().manual_seed(8)
        x = (torch.randn(4, 9, generator=g) * 3).requires_grad_()
        y = aps.torch.fake_quantize(x, "e4m3", rounding="stochastic", seed=5)
        self.assertTrue(y.requires_grad)
        self.assertTrue(torch.equal(y.detach(), aps.quantize(x, "e4m3", "stochastic", seed=5)))
        upstream = torch.randn(4, 9, generator=g)
        y.backward(upstream)
        self.assertTrue(torch.equal(x.grad, upstream))

    def test_gradient_reaches_earlier_layers(self):
        import aps.torch
        torch.manual_seed(0)
        layer = torch.nn.Linear(5, 3)
        x = torch.randn(7, 5)
        loss = aps.torch.fake_quantize(layer(x), "e2m1").pow(2).sum()
        loss.backward()
        self.assertIsNotNone(layer.weight.grad)
        self.assertGreater(float(layer.weight.grad.abs().sum()), 0.0)
        # Straight through: the gradient of sum(q(h)^2) is 2 q(h) at h, through the identity.
        h = layer(x)
        q = aps.quantize(h, "e2m1")
        expected = (2 * q).t() @ x
        self.assertTrue(torch.allclose(layer.weight.grad, expected, rtol=1e-5, atol=1e-5))

    def test_dtypes_and_mx(self):
        import aps.torch
        x = torch.randn(64, dtype=torch.bfloat16).requires_grad_()
        y = aps.torch.fake_quantize(x, "mxfp4")
        self.assertEqual(y.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(y.detach(), aps.block_quantize(x, "e2m1", 32)))
        y.sum().backward()
        self.assertEqual(x.grad.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(x.grad, torch.ones_like(x)))
        z = aps.torch.fake_quantize(x, "e4m3", block_size=16)
        self.assertTrue(torch.equal(z.detach(), aps.block_quantize(x, "e4m3", 16)))


@unittest.skipIf(torch is None, "PyTorch is not installed")
class ReadmeExamples(unittest.TestCase):
    """The README's Python blocks ("From PyTorch") run as written; those that use `ddp_model`
    get a one-rank gloo DDP model with conv1 and fc layers, trained one step through the hook."""

    def blocks(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with open(os.path.join(root, "README.md")) as f:
            text = f.read()
        section = text[text.index("## From PyTorch"):]
        section = section[:section.index("\n## ", 3)]
        return re.findall(r"```python\n(.*?)```", section, re.S)

    def test_blocks_run(self):
        import tempfile
        import torch.distributed as dist
        blocks = self.blocks()
        self.assertGreaterEqual(len(blocks), 4)
        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
            try:
                for block in blocks:
                    with self.subTest(block=block.splitlines()[0]):
                        namespace = {}
                        if "ddp_model" in block:
                            model = torch.nn.Sequential()
                            model.add_module("conv1", torch.nn.Conv2d(1, 4, 3))
                            model.add_module("flatten", torch.nn.Flatten())
                            model.add_module("fc", torch.nn.Linear(4 * 6 * 6, 3))
                            namespace["ddp_model"] = torch.nn.parallel.DistributedDataParallel(model)
                        with contextlib.redirect_stdout(io.StringIO()):
                            exec(compile(block, "README.md", "exec"), namespace)
                        if "ddp_model" in block:
                            namespace["ddp_model"](torch.randn(2, 1, 8, 8)).sum().backward()
                            state = namespace["state"]
                            state.close()
                            self.assertEqual(state.steps, 1)
                            if "hybrid" in block:
                                formats = [state.param_format(p) for p in namespace["ddp_model"].parameters()]
                                self.assertEqual(formats, [1, 1, 2, 2])
            finally:
                dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main()
