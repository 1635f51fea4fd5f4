#pragma once

// CUDA versions of the optimizers' per-element updates (framework/optim/kernels/Updates.h)
// over n contiguous device floats, and LARS's L2 norm. The arithmetic is the shared one, so
// the results are the CPU's bits. Includes no CUDA header.

#include "framework/optim/kernels/Updates.h"

#include <cstdint>

struct CUstream_st;

namespace aps::optim::cuda {

using Stream = CUstream_st*;  // cudaStream_t

// buf: the momentum buffer, null when o.momentum == 0.
void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, const kernels::SgdParams& o,
               Stream stream = nullptr);
void larsUpdate(float* param, const float* grad, float* velocity, int64_t n, float momentum, float scaledLr,
                float weightDecay, Stream stream = nullptr);
void adamWUpdate(float* param, const float* grad, float* expAvg, float* expAvgSq, int64_t n,
                 const kernels::AdamWParams& o, Stream stream = nullptr);
// sqrt(sum x^2) in the CPU's order (kernels::squaredNormBlock); waits for the stream.
double l2Norm(const float* x, int64_t n, Stream stream = nullptr);

}  // namespace aps::optim::cuda
