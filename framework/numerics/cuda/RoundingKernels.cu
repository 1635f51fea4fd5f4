#include "framework/numerics/cuda/RoundingKernels.h"

#include "framework/core/Philox.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/tensor/cuda/CudaCheck.h"
#include "framework/tensor/cuda/Launch.cuh"

#include <cuda_runtime.h>

namespace aps::precision::cuda {

namespace {

using aps::cuda::launch::firstIndex;
using aps::cuda::launch::gridStride;
using aps::cuda::launch::kThreads;

unsigned gridFor(int64_t units) { return aps::cuda::launch::gridFor(units, 8192); }

template <bool kBf16>
__global__ void roundKernel(float* data, int64_t n) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    data[i] = kBf16 ? kernels::roundBf16(data[i]) : kernels::roundFp16(data[i]);
  }
}

__global__ void roundStochasticKernel(float* data, int64_t n, kernels::RoundingParams p, uint64_t seed,
                                      uint64_t stream) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    data[i] = kernels::roundValue(data[i], RoundingMode::Stochastic,
                                  randomBits32(seed, stream, static_cast<uint64_t>(i)), p);
  }
}

}  // namespace

void roundToComputeFormat(float* data, int64_t n, ComputeFormat format, void* stream) {
  if (format == ComputeFormat::Fp32 || n <= 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (format == ComputeFormat::Fp16) {
    roundKernel<false><<<gridFor(n), kThreads, 0, s>>>(data, n);
  } else {
    roundKernel<true><<<gridFor(n), kThreads, 0, s>>>(data, n);
  }
  APS_CUDA_CHECK(cudaGetLastError());
}

void roundStochasticToComputeFormat(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream,
                                    void* cudaStream) {
  if (format == ComputeFormat::Fp32 || n <= 0) return;
  roundStochasticKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(cudaStream)>>>(
      data, n, kernels::sixteenBitParams(format), seed, stream);
  APS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace aps::precision::cuda
