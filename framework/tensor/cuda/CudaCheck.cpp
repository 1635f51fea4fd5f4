#include "framework/tensor/cuda/CudaCheck.h"

#include "framework/core/Error.h"

namespace aps::cuda {

void throwCudaError(const char* file, int line, const char* expression, const char* message) {
  detail::throwCheckFailed(file, line, expression, fmt::format("CUDA error in {}: {}", expression, message));
}

}  // namespace aps::cuda
