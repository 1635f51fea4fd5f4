#pragma once

// The fixed-order float sum used by the per-channel reductions (batch norm): element i of a
// run goes to lane i % kLanes, each lane adds its elements in order, and the lanes are then
// combined pairwise in a fixed order. The CPU computes all lanes in one loop (vectorised);
// a CUDA block gives each lane its own thread. Both follow this order, so both produce the
// same bits for the same run.

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Math.h"

#include <cstdint>

namespace aps::kernels {

constexpr int kLanes = 16;

// acc[0] <- the fixed pairwise combination of acc[0 .. kLanes).
APS_HOST_DEVICE inline void combineLanes(float* acc) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
}

// One lane step of the batch norm reductions: acc + (x - mean)^2 and acc + g * (x - mean),
// each with one fused multiply-add. On the CPU the plain expression is kept: GCC fuses it in
// the vectorised lane loop (tests/ops/cpu/SharedKernelsTest.cpp checks the CPU kernel
// against fused steps), while an explicit std::fma there stops the loop from vectorising
// as well and makes batch norm markedly slower. The device writes the fused step out, so
// the result does not hang on where nvcc chooses to fuse.
APS_HOST_DEVICE inline float addSquaredDeviation(float acc, float x, float mean) {
  const float d = x - mean;
#if APS_DEVICE_CODE
  return fmaf32(d, d, acc);
#else
  return acc + d * d;
#endif
}
APS_HOST_DEVICE inline float addGradDeviation(float acc, float g, float x, float mean) {
#if APS_DEVICE_CODE
  return fmaf32(g, x - mean, acc);
#else
  return acc + g * (x - mean);
#endif
}

}  // namespace aps::kernels
