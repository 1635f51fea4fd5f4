#pragma once

// The per-block and per-element arithmetic of DettmersCodec, shared by the CPU codec and the
// CUDA codec: the block's absmax (kernels::absBits, an integer max), the inverse it scales
// by, the nearest code of a scaled value and a code's value.

#include "framework/core/HostDevice.h"

#include <cstdint>

namespace aps::precision::kernels {

// 1 / absmax, or 0 when absmax is 0 or NaN (the block then encodes as code 0 .. of zeros).
APS_HOST_DEVICE inline float dettmersInverse(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// Index of the code nearest to v: the number of the 255 sorted midpoints below v (ties go to
// the larger code; NaN to code 0), by branch-free binary search (128 + 64 + ... + 1 = 255),
// capped at `top` (254 for the linear type, whose code 255 is unused).
APS_HOST_DEVICE inline uint32_t dettmersNearestCode(float v, const float* midpoints, uint32_t top) {
  uint32_t idx = 0;
  for (uint32_t step = 128; step >= 1; step >>= 1) idx += midpoints[idx + step - 1] < v ? step : 0u;
  return idx < top ? idx : top;
}

// The value of code c of a block with the given absmax: codeBook[c] * absmax (a NaN absmax's
// NaN as x86 keeps it, on the GPU too).
APS_HOST_DEVICE inline float dettmersDecode(float codeValue, float absmax) { return mulAsX86(codeValue, absmax); }

}  // namespace aps::precision::kernels
