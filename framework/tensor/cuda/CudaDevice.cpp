// Device checks shared by the CUDA build and the CPU-only build (both have deviceCount()).
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::cuda {

namespace {
StreamHandle& currentStreamSlot() {
  thread_local StreamHandle stream = nullptr;
  return stream;
}
}  // namespace

StreamHandle currentStream() { return currentStreamSlot(); }
StreamGuard::StreamGuard(StreamHandle stream) : previous_(currentStreamSlot()) { currentStreamSlot() = stream; }
StreamGuard::~StreamGuard() { currentStreamSlot() = previous_; }

void requireDevice(int index, const std::string& what) {
  APS_CHECK(compiledWithCuda(),
            "{}: this build of aps has no CUDA backend (it was built with APS_WITH_CUDA=OFF or without the CUDA "
            "toolkit); use cpu",
            what);
  const int count = deviceCount();
  APS_CHECK(count > 0, "{}: no CUDA device is visible on this machine (check nvidia-smi and CUDA_VISIBLE_DEVICES)",
            what);
  APS_CHECK(index >= 0 && index < count, "{}: cuda:{} does not exist; this machine has {} CUDA device{} (cuda:0..{})",
            what, index, count, count == 1 ? "" : "s", count - 1);
}

}  // namespace aps::cuda
