#pragma once

// Convolution on the GPU through cuDNN 9, with the CPU kernels' signature (framework/ops/cpu/Kernels.h):
// device pointers, NCHW float32, backward kernels overwrite their outputs, null outputs are
// skipped. This header needs no CUDA headers.

#include "framework/ops/cpu/Kernels.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::cuda {

struct ConvOptions {
  bool deterministic = false;  // only algorithms cuDNN marks deterministic (same bits every run)
  bool allowTf32 = true;       // TF32 tensor cores for float32 (PyTorch's default for convolutions)
};

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const cpu::Conv2dShape& shape,
                   const ConvOptions& options, StreamHandle stream);
void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const cpu::Conv2dShape& shape, const ConvOptions& options,
                    StreamHandle stream);

// How many distinct (shape, options) algorithm choices are cached; the choice is made once per
// shape, so a training step after the first makes no heuristic queries.
size_t convolutionPlansCached();

}  // namespace aps::cuda
