#pragma once

// Element-wise ops of framework/ops/Elementwise.cpp, one value at a time. The CPU maps
// inline these into their loops; the CUDA kernels (ops/cuda/Kernels.h) call them per thread.

#include "framework/core/HostDevice.h"

namespace aps::kernels {

APS_HOST_DEVICE inline float add(float x, float y) { return x + y; }
APS_HOST_DEVICE inline float sub(float x, float y) { return x - y; }
APS_HOST_DEVICE inline float mul(float x, float y) { return x * y; }
APS_HOST_DEVICE inline float scale(float x, float s) { return x * s; }
APS_HOST_DEVICE inline float addScalar(float x, float s) { return x + s; }
APS_HOST_DEVICE inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
// ReLU's gradient from its output y (the saved tensor): y > 0 exactly where x > 0.
APS_HOST_DEVICE inline float reluBackward(float grad, float y) { return y > 0.0f ? grad : 0.0f; }

}  // namespace aps::kernels
