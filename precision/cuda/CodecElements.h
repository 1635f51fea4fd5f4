#pragma once

// The per-unit steps of the device codecs (CodecKernels.h): what one CUDA thread does for one
// value (or one byte of two 4-bit values), written once as APS_HOST_DEVICE functions over the
// shared arithmetic of precision/kernels/*.h. CodecKernels.cu launches them on a GPU; the
// emulated device (emu/CodecKernelsEmu.cpp) runs them in host loops, so both write the same
// wire bytes.

#include "framework/core/HostDevice.h"
#include "framework/core/Philox.h"
#include "precision/cuda/CodecKernels.h"
#include "precision/kernels/Dettmers.h"
#include "framework/numerics/FloatRounding.h"
#include "precision/kernels/Scaling.h"

#include <cstdint>

namespace aps::precision::cuda::elements {

// The element format's wire value of element i (FloatCodec's packing).
APS_HOST_DEVICE inline float elementValue(const kernels::CodeDecodeParams& d, int32_t width, const uint8_t* in,
                                          int64_t i) {
  if (width == 0) {
    const uint32_t byte = in[i / 2];
    return kernels::decodeCode((i & 1) ? byte >> 4 : byte & 15u, d);
  }
  if (width == 1) return kernels::decodeCode(in[i], d);
  if (width == 2) return kernels::decodeCode(uint32_t{in[2 * i]} | (uint32_t{in[2 * i + 1]} << 8), d);
  const uint8_t* b = in + 4 * i;
  return bitCast<float>(uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24));
}

struct Rounding {
  kernels::RoundingParams params;
  RoundingMode mode;
  int32_t width;
  uint64_t seed, stream;
  int64_t offset;
};

inline Rounding roundingOf(const DeviceCodecParams& p, const EncodeContext& ctx) {
  return Rounding{p.rounding, p.mode, p.width, ctx.seed, ctx.stream, ctx.offset};
}

APS_HOST_DEVICE inline uint32_t code(const Rounding& r, float x, int64_t i) {
  const uint32_t bits =
      r.mode == RoundingMode::Stochastic ? randomBits32(r.seed, r.stream, static_cast<uint64_t>(r.offset + i)) : 0u;
  return kernels::roundCode(x, r.mode, bits, r.params);
}

// Where the values to encode come from: an fp32 buffer, a block-scaled fp32 buffer, or the
// sum of two encoded buffers (the fused decodeAddEncode of the float codec).
struct Plain {
  const float* in;
  APS_HOST_DEVICE float operator()(int64_t i) const { return in[i]; }
};
struct Scaled {
  const float* in;
  const uint32_t* maxBits;  // per block
  int64_t len;
  int32_t emax;
  APS_HOST_DEVICE float operator()(int64_t i) const {
    return kernels::blockScaledInput(in[i], kernels::blockScaleCode(maxBits[i / len], emax));
  }
};
struct Sum {
  kernels::CodeDecodeParams decode;
  int32_t width;
  const uint8_t* a;
  const uint8_t* b;
  APS_HOST_DEVICE float operator()(int64_t i) const {
    return addAsX86(elementValue(decode, width, a, i), elementValue(decode, width, b, i));
  }
};

// Encodes unit u of n values: a value's bytes, or one byte of two 4-bit values (so units never
// share a byte, and out may alias the inputs of Sum).
template <class Source>
APS_HOST_DEVICE inline void encodeUnit(const Rounding& r, const Source& src, int64_t n, int64_t u, uint8_t* out) {
  if (r.width == 0) {
    const int64_t i = 2 * u;
    uint32_t byte = code(r, src(i), i);
    if (i + 1 < n) byte |= code(r, src(i + 1), i + 1) << 4;
    out[u] = static_cast<uint8_t>(byte);
  } else if (r.width == 1) {
    out[u] = static_cast<uint8_t>(code(r, src(u), u));
  } else if (r.width == 2) {
    const uint32_t c = code(r, src(u), u);
    out[2 * u] = static_cast<uint8_t>(c);
    out[2 * u + 1] = static_cast<uint8_t>(c >> 8);
  } else {
    const uint32_t bits =
        r.mode == RoundingMode::Stochastic ? randomBits32(r.seed, r.stream, static_cast<uint64_t>(r.offset + u)) : 0u;
    const uint32_t v = bitCast<uint32_t>(kernels::roundValue(src(u), r.mode, bits, r.params));
    for (int k = 0; k < 4; ++k) out[4 * u + k] = static_cast<uint8_t>(v >> (8 * k));
  }
}

// out[i] = (or +=) element i's value, times its block's scale when `scales` is given. A float
// codec's decode-add keeps a decoded NaN, as FloatCodec's does (addDecoded).
APS_HOST_DEVICE inline void decodeElement(const kernels::CodeDecodeParams& d, int32_t width, const uint8_t* in,
                                          int64_t i, const uint8_t* scales, int64_t len, float* out, bool add) {
  float v = elementValue(d, width, in, i);
  if (scales) v = kernels::blockScaledOutput(v, scales[i / len]);
  if (add) {
    out[i] = scales ? addAsX86(out[i], v) : addDecoded(out[i], v);
  } else {
    out[i] = v;
  }
}

// Dettmers: block b's wire bytes start at b * (len + 4): its fp32 absmax, then one code a value.
APS_HOST_DEVICE inline void dettmersEncodeElement(const float* midpoints, uint32_t top, const float* in, int64_t i,
                                                  int64_t len, const uint32_t* maxBits, uint8_t* out) {
  const int64_t b = i / len;
  const uint32_t absmaxBits = maxBits[b];
  const float inv = kernels::dettmersInverse(bitCast<float>(absmaxBits));
  uint8_t* block = out + b * (len + 4);
  if (i == b * len) {
    for (int k = 0; k < 4; ++k) block[k] = static_cast<uint8_t>(absmaxBits >> (8 * k));
  }
  block[4 + (i - b * len)] = static_cast<uint8_t>(kernels::dettmersNearestCode(in[i] * inv, midpoints, top));
}

APS_HOST_DEVICE inline void dettmersDecodeElement(const float* book, const uint8_t* in, int64_t i, int64_t len,
                                                  float* out, bool add) {
  const int64_t b = i / len;
  const uint8_t* block = in + b * (len + 4);
  const float absmax = bitCast<float>(uint32_t{block[0]} | (uint32_t{block[1]} << 8) | (uint32_t{block[2]} << 16) |
                                      (uint32_t{block[3]} << 24));
  const float v = kernels::dettmersDecode(book[block[4 + (i - b * len)]], absmax);
  out[i] = add ? addAsX86(out[i], v) : v;
}

}  // namespace aps::precision::cuda::elements
