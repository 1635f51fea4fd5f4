#include "framework/tensor/cuda/CudaRuntime.h"

#include "framework/tensor/cuda/CudaCheck.h"

#include <cuda_runtime.h>

namespace aps::cuda {

namespace {
__global__ void fillKernel(float* out, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
}  // namespace

bool compiledWithCuda() { return true; }

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::string deviceDescription(int index) {
  cudaDeviceProp prop{};
  APS_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.totalGlobalMem >> 30) + " GiB";
}

void fillOnDevice(float* host, int64_t n, float value, int index) {
  if (n <= 0) return;
  APS_CUDA_CHECK(cudaSetDevice(index));
  float* device = nullptr;
  APS_CUDA_CHECK(cudaMalloc(&device, static_cast<size_t>(n) * sizeof(float)));
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  fillKernel<<<static_cast<unsigned>(blocks), threads>>>(device, n, value);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaMemcpy(host, device, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  APS_CUDA_CHECK(status);
}

}  // namespace aps::cuda
