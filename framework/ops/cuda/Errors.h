#pragma once

// Errors the CUDA op kernels report, raised from plain C++ (Errors.cpp) because nvcc cannot
// compile the fmt-based APS_CHECK.

#include <cstdint>

namespace aps::cuda {

[[noreturn]] void throwBadTarget(int64_t target, int64_t position, int64_t classes, int64_t ignoreIndex);

}  // namespace aps::cuda
