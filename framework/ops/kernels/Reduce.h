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
// each with one fused multiply-add (the CPU's AVX-512 loops in ops/cpu/Reduce.h are the same
// steps in registers).
APS_HOST_DEVICE inline float addSquaredDeviation(float acc, float x, float mean) {
  const float d = x - mean;
  return fmaf32(d, d, acc);
}
APS_HOST_DEVICE inline float addGradDeviation(float acc, float g, float x, float mean) {
  return fmaf32(g, x - mean, acc);
}

}  // namespace aps::kernels
