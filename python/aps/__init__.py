"""aps: low-precision float formats, wire codecs and gradient all-reduce.

The functions here run aps's C++ code (the module aps._aps), so their results are
bit-identical to the C++ tools (aps_formats, aps_train)::

    import numpy as np, aps
    aps.quantize(np.array([0.3, 1.7], np.float32), "e4m3")             # array([0.3125, 1.75])
    aps.quantize(x, {"exponent_bits": 3, "mantissa_bits": 2}, "stochastic", seed=1)
    data = aps.encode(x, "e5m2"); y = aps.decode(data, "e5m2", x.size)
    aps.block_quantize(x, "e2m1", 32)                                 # what MXFP4 keeps of x
    aps.info("e4m3")["max"]                                            # 448.0

Arrays in, arrays of the same kind out: a NumPy array gives a NumPy array, a torch tensor a
torch tensor with the input's shape, dtype and device. The arithmetic is float32's on the CPU:
other float dtypes (float16, bfloat16, float64) are converted to float32 first and the result is
cast back; integer and bool inputs, lists and scalars give float32. Inputs are never modified, and a tensor that
requires grad is read detached (aps.torch.fake_quantize is the differentiable form).

PyTorch users: aps.torch.CommState and aps.torch.comm_hook (a DDP comm hook),
aps.torch.fake_quantize (straight-through fake quantization).
"""
import sys
from typing import Any, Callable, List, Sequence, Tuple, Union

import numpy as np

from . import _aps
from ._aps import Error, Format, __version__, encoded_bytes, rounding_modes  # noqa: F401

__all__ = [
    "Error", "Format", "MX_ELEMENTS", "MX_TYPES", "PRESETS", "__version__", "aps_shifts", "block_quantize", "decode", "encode",
    "encoded_bytes", "info", "quantize", "rounding_modes", "scale_by_power_of_two",
]

# The preset format names (aps_formats and YAML configs accept the same).
PRESETS = ("fp32", "fp16", "bf16", "e5m2", "e4m3", "e4m3_ieee", "e3m0", "e3m2", "e2m3", "e2m1")
# OCP MX codec names (block 32, an E8M0 scale byte per block, then the elements): encode/decode
# and the comm hook's format accept them; block_quantize(x, element, 32) gives their values.
MX_TYPES = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4")
# Each MX type's element format.
MX_ELEMENTS = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e3m2": "e3m2", "mxfp6_e2m3": "e2m3", "mxfp4": "e2m1"}

# A format: a preset name, a dict of format keys (as in YAML) or an aps.Format.
FormatSpec = Union[str, dict, Format]
ArrayLike = Any  # a NumPy array, a torch tensor, or anything np.asarray takes


def _torch_tensor(x: Any) -> bool:
    # torch is only looked at when the caller imported it: `import aps` does not load torch.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _float32_input(x: ArrayLike, function: str, argument: str) -> Tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """x as a C-contiguous float32 NumPy array, and the function that turns a float32 result
    of x's shape back into x's kind (NumPy or torch), dtype and device."""
    if _torch_tensor(x):
        import torch
        if x.is_complex() or x.is_quantized:
            raise TypeError(f"aps.{function}: {argument} must be a real tensor (float, bfloat16, half, integer or "
                            f"bool), not {x.dtype}")
        dtype = x.dtype if x.is_floating_point() else torch.float32
        device = x.device
        array = x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
        return array, lambda result: torch.from_numpy(result).to(device=device, dtype=dtype)
    array = np.asarray(x)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"aps.{function}: {argument} must be an array of real numbers (float, integer or bool), "
                        f"not dtype {array.dtype}")
    # A NumPy float array keeps its dtype; lists, scalars and integer arrays give float32.
    dtype = array.dtype if isinstance(x, np.ndarray) and array.dtype.kind == "f" else np.dtype(np.float32)
    array = np.ascontiguousarray(array, dtype=np.float32)
    if dtype == np.float32:
        return array, lambda result: result
    return array, lambda result: result.astype(dtype)


def quantize(x: ArrayLike, format: FormatSpec, rounding: str = "nearest", seed: int = 0, stream: int = 0) -> Any:
    """x rounded to the format (shape, dtype and kind of x kept). Stochastic rounding gives
    element i (flat index) the draw randomBits32(seed, stream, i), as `aps_formats quantize
    --seed` does with stream 0. A block-scaled codec name (an MX type) is refused with a
    pointer to block_quantize."""
    array, back = _float32_input(x, "quantize", "x")
    return back(_aps.quantize(array, format, rounding, seed, stream))


def block_quantize(x: ArrayLike, format: FormatSpec, block_size: int = 32, rounding: str = "nearest", seed: int = 0,
                   stream: int = 0) -> Any:
    """x (flat order) with one power-of-two scale per block: 2^(floor(log2(amax)) - emax),
    elements rounded to the format and saturated (OCP MX with block 32 and an MX element
    type); block_size 0: one scale for all of x."""
    array, back = _float32_input(x, "block_quantize", "x")
    return back(_aps.block_quantize(array, format, block_size, rounding, seed, stream))


def scale_by_power_of_two(x: ArrayLike, shift: int) -> Any:
    """x * 2**shift, rounded once (exact unless the result is subnormal or overflows)."""
    array, back = _float32_input(x, "scale_by_power_of_two", "x")
    return back(_aps.scale_by_power_of_two(array, shift))


def aps_shifts(layers: Sequence[ArrayLike], format: FormatSpec, world_size: int = 1, mode: str = "aps") -> List[int]:
    """APS power-of-two shift per layer (multiply by 2**shift before quantizing) for one
    process's layers (with world_size > 1 the caller takes the MAX over ranks itself)."""
    arrays = [_float32_input(layer, "aps_shifts", f"layers[{i}]")[0] for i, layer in enumerate(layers)]
    return _aps.aps_shifts(arrays, format, world_size, mode)


def encode(x: ArrayLike, codec: str, seed: int = 0, stream: int = 0) -> Any:
    """The wire bytes of x under a codec spec ('e4m3', 'e5m2:stochastic', 'mxfp4',
    'dettmers_dynamic/block256', ...): bytes, or for a torch tensor a uint8 tensor on its
    device."""
    array, _ = _float32_input(x, "encode", "x")
    data = _aps.encode(array, codec, seed, stream)
    if _torch_tensor(x):
        import torch
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(x.device)
    return data


def _byte_input(data: Any) -> Any:
    if _torch_tensor(data):
        import torch
        if data.dtype not in (torch.uint8, torch.int8):
            raise TypeError(f"aps.decode: data must be a uint8 tensor, not {data.dtype}")
        return data.detach().cpu().contiguous().numpy()
    if isinstance(data, np.ndarray):
        if data.dtype.itemsize != 1:
            raise TypeError(f"aps.decode: data must be a uint8 array, not dtype {data.dtype}")
        return np.ascontiguousarray(data)
    return data


def decode(data: Any, codec: str, n: int) -> Any:
    """n float32 values back from wire bytes: bytes, bytearray, memoryview, a uint8 NumPy array
    or a uint8 torch tensor (then a float32 tensor on its device)."""
    values = _aps.decode(_byte_input(data), codec, n)
    if _torch_tensor(data):
        import torch
        return torch.from_numpy(values).to(data.device)
    return values


def info(format: FormatSpec) -> dict:
    """What `aps_formats info FORMAT` prints, as a dict (format: a preset name, a dict of
    format keys or an aps.Format)."""
    f = format if isinstance(format, Format) else Format(format)
    return {
        "format": f.describe(),
        "bits": f.bits,
        "bias": f.bias,
        "max": f.max_value,
        "min_normal": f.min_normal,
        "min_subnormal": f.min_subnormal,
        "epsilon": f.epsilon,
        "finite_values": f.finite_count,
        "inf": f.has_inf,
        "nan": f.has_nan,
    }
