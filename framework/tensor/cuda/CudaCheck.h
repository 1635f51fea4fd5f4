#pragma once

// Error checking for .cu files. nvcc cannot compile fmt's compile-time format strings,
// so CUDA translation units report through this fmt-free entry point instead of APS_CHECK.
namespace aps::cuda {

[[noreturn]] void throwCudaError(const char* file, int line, const char* expression, const char* message);

}  // namespace aps::cuda

#define APS_CUDA_CHECK(expr)                                                                                         \
  do {                                                                                                               \
    const cudaError_t status_ = (expr);                                                                              \
    if (status_ != cudaSuccess) ::aps::cuda::throwCudaError(__FILE__, __LINE__, #expr, cudaGetErrorString(status_)); \
  } while (0)
