// Grid-stride launches around the shared optimizer updates; LARS's norm gives each thread one
// kNormBlock block, as the CPU gives each task whole blocks, then adds the blocks in order.
#include "framework/optim/cuda/Updates.h"

#include "framework/tensor/cuda/CudaCheck.h"

#include "framework/tensor/cuda/Launch.cuh"

#include <cuda_runtime.h>

#include <cmath>

namespace aps::optim::cuda {

namespace {

using aps::cuda::launch::firstIndex;
using aps::cuda::launch::gridFor;
using aps::cuda::launch::gridStride;
using aps::cuda::launch::kThreads;

__global__ void sgdKernel(float* p, const float* g, float* buf, int64_t n, kernels::SgdParams o) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    kernels::sgdUpdate(p[i], g[i], buf != nullptr ? buf + i : nullptr, o);
  }
}

__global__ void larsKernel(float* p, const float* g, float* v, int64_t n, float momentum, float scaledLr, float wd) {
  for (int64_t i = firstIndex(); i < n; i += gridStride())
    kernels::larsUpdate(p[i], g[i], v[i], momentum, scaledLr, wd);
}

__global__ void adamWKernel(float* p, const float* g, float* m, float* v, int64_t n, kernels::AdamWParams o) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) kernels::adamWUpdate(p[i], g[i], m[i], v[i], o);
}

__global__ void normBlocksKernel(double* partial, const float* x, int64_t n, int64_t blocks) {
  for (int64_t b = firstIndex(); b < blocks; b += gridStride()) partial[b] = kernels::squaredNormBlock(x, n, b);
}

__global__ void normTotalKernel(double* partial, int64_t blocks) {
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += partial[b];
  partial[0] = total;
}

}  // namespace

void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, const kernels::SgdParams& o,
               StreamHandle stream) {
  if (n <= 0) return;
  sgdKernel<<<gridFor(n), kThreads, 0, stream>>>(param, grad, buf, n, o);
  APS_CUDA_CHECK(cudaGetLastError());
}

void larsUpdate(float* param, const float* grad, float* velocity, int64_t n, float momentum, float scaledLr,
                float weightDecay, StreamHandle stream) {
  if (n <= 0) return;
  larsKernel<<<gridFor(n), kThreads, 0, stream>>>(param, grad, velocity, n, momentum, scaledLr, weightDecay);
  APS_CUDA_CHECK(cudaGetLastError());
}

void adamWUpdate(float* param, const float* grad, float* expAvg, float* expAvgSq, int64_t n,
                 const kernels::AdamWParams& o, StreamHandle stream) {
  if (n <= 0) return;
  adamWKernel<<<gridFor(n), kThreads, 0, stream>>>(param, grad, expAvg, expAvgSq, n, o);
  APS_CUDA_CHECK(cudaGetLastError());
}

double l2Norm(const float* x, int64_t n, StreamHandle stream) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kernels::kNormBlock - 1) / kernels::kNormBlock;
  double* partial = nullptr;
  APS_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&partial), static_cast<size_t>(blocks) * sizeof(double), stream));
  normBlocksKernel<<<gridFor(blocks), kThreads, 0, stream>>>(partial, x, n, blocks);
  normTotalKernel<<<1, 1, 0, stream>>>(partial, blocks);
  cudaError_t status = cudaGetLastError();
  double total = 0.0;
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(&total, partial, sizeof total, cudaMemcpyDeviceToHost, stream);
  }
  cudaFreeAsync(partial, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  APS_CUDA_CHECK(status);
  return std::sqrt(total);
}

}  // namespace aps::optim::cuda
