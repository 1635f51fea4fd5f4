#pragma once

// CUDA versions of the optimizers' per-element updates (framework/optim/kernels/Updates.h)
// over n contiguous device floats, and LARS's L2 norm. The arithmetic is the shared one, so
// the results are the CPU's bits. Includes no CUDA header.

#include "framework/optim/kernels/Updates.h"

#include "framework/tensor/cuda/CudaRuntime.h"

#include <cstdint>

namespace aps::optim::cuda {

using StreamHandle = ::aps::cuda::StreamHandle;

// buf: the momentum buffer, null when o.momentum == 0.
void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, const kernels::SgdParams& o,
               StreamHandle stream = nullptr);
void larsUpdate(float* param, const float* grad, float* velocity, int64_t n, float momentum, float scaledLr,
                float weightDecay, StreamHandle stream = nullptr);
void adamWUpdate(float* param, const float* grad, float* expAvg, float* expAvgSq, int64_t n,
                 const kernels::AdamWParams& o, StreamHandle stream = nullptr);
// sqrt(sum x^2) in the CPU's order (kernels::squaredNormBlock); waits for the stream.
double l2Norm(const float* x, int64_t n, StreamHandle stream = nullptr);

}  // namespace aps::optim::cuda
