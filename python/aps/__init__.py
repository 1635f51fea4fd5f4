"""aps: low-precision float formats, wire codecs and gradient all-reduce.

The functions here run aps's C++ code (the module aps._aps), so their results are
bit-identical to the C++ tools (aps_formats, aps_train)::

    import numpy as np, aps
    aps.quantize(np.array([0.3, 1.7], np.float32), "e4m3")             # array([0.3125, 1.75])
    aps.quantize(x, {"exponent_bits": 3, "mantissa_bits": 2}, "stochastic", seed=1)
    data = aps.encode(x, "e5m2"); y = aps.decode(data, "e5m2", x.size)
    aps.block_quantize(x, "e2m1", 32)                                 # what MXFP4 keeps of x
    aps.info("e4m3")["max"]                                            # 448.0

PyTorch users: aps.torch.CommState and aps.torch.comm_hook (a DDP comm hook).
"""
from ._aps import (  # noqa: F401
    Error,
    Format,
    aps_shifts,
    block_quantize,
    decode,
    encode,
    encoded_bytes,
    quantize,
    rounding_modes,
    scale_by_power_of_two,
)

__all__ = [
    "Error", "Format", "MX_TYPES", "PRESETS", "aps_shifts", "block_quantize", "decode", "encode", "encoded_bytes", "info", "quantize",
    "rounding_modes", "scale_by_power_of_two",
]

# The preset format names (aps_formats and YAML configs accept the same).
PRESETS = ("fp32", "fp16", "bf16", "e5m2", "e4m3", "e4m3_ieee", "e3m0", "e3m2", "e2m3", "e2m1")
# OCP MX codec names (block 32, an E8M0 scale byte per block, then the elements): encode/decode
# and the comm hook's format accept them.
MX_TYPES = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4")


def info(format):
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
