// Built instead of CudaRuntime.cu when the CUDA backend is off.
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::cuda {

bool compiledWithCuda() { return false; }
int deviceCount() { return 0; }
std::string deviceDescription(int) { APS_FAIL("this build of aps has no CUDA backend (APS_WITH_CUDA=OFF or toolkit not found)"); }
void fillOnDevice(float*, int64_t, float, int) {
  APS_FAIL("this build of aps has no CUDA backend (APS_WITH_CUDA=OFF or toolkit not found)");
}

}  // namespace aps::cuda
