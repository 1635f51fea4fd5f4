// The 16-bit rounding launches of a build without CUDA: each throws, naming what is missing.
#include "framework/core/Error.h"
#include "framework/numerics/cuda/RoundingKernels.h"

namespace aps::precision::cuda {

void roundToComputeFormat(float*, int64_t, ComputeFormat, void*) {
  APS_FAIL("device 16-bit rounding: this build of aps has no CUDA (configure with the CUDA toolkit)");
}
void roundStochasticToComputeFormat(float*, int64_t, ComputeFormat, uint64_t, uint64_t, void*) {
  APS_FAIL("device stochastic 16-bit rounding: this build of aps has no CUDA (configure with the CUDA toolkit)");
}

}  // namespace aps::precision::cuda
