#pragma once

// Matrix products on the GPU through cuBLAS, row-major like the CPU front ends
// (framework/ops/Linear.h): device pointers, float32 (16-bit operands on request). Backward kernels overwrite their
// outputs; null outputs are skipped. This header needs no CUDA headers.

#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>

namespace aps::cuda {

struct GemmOptions {
  bool allowTf32 = true;  // TF32 tensor cores for float32 products (off: full fp32 FMA)
  // fp16 / bf16 (precision.compute): the operands, already values of the format, go to
  // cublasGemmEx as 2-byte matrices with fp32 compute and a float32 result (tensor cores); the
  // bias is added in float32 and the autograd rounding rounds the sum once, as on the CPU.
  precision::ComputeFormat format = precision::ComputeFormat::Fp32;
};

// out (m, n) <- a (m, k) * b (k, n)
void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n, const GemmOptions& options,
            StreamHandle stream);

// out (rows, outFeatures) <- in (rows, inFeatures) * weight (outFeatures, inFeatures)^T + bias (outFeatures)
void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                   int64_t inFeatures, int64_t outFeatures, const GemmOptions& options, StreamHandle stream);
void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures,
                    const GemmOptions& options, StreamHandle stream);

}  // namespace aps::cuda
