#pragma once

// Convolution on the GPU through cuDNN 9, with the CPU kernels' signature (framework/ops/cpu/Kernels.h):
// device pointers, NCHW float32, backward kernels overwrite their outputs, null outputs are
// skipped. This header needs no CUDA headers.

#include "framework/ops/cpu/Kernels.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/numerics/ComputeFormat.h"

namespace aps::cuda {

struct ConvOptions {
  bool deterministic = false;  // only algorithms cuDNN marks deterministic (same bits every run)
  bool allowTf32 = true;       // TF32 tensor cores for float32 (PyTorch's default for convolutions)
  // fp16 / bf16 (precision.compute): the operands, already values of the format, go to cuDNN as
  // 2-byte tensors with float compute (tensor cores); the convolution's results are rounded to
  // the format, as the autograd rounding would. A biased convolution keeps float32 tensors
  // (TF32 products of 16-bit values are exact) so that its bias is added before the one
  // rounding, as on the CPU.
  precision::ComputeFormat format = precision::ComputeFormat::Fp32;
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
