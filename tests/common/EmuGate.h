#pragma once

// A test helper of the emulated CUDA device (APS_CUDA_EMULATION=ON only).
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"

#include <condition_variable>
#include <mutex>

namespace aps::testsupport {

// Holds a stream at one point of its queue until released: work queued after it cannot have
// run while the gate is shut, whatever the machine's speed.
class Gate {
 public:
  void shutOn(cuda::StreamHandle stream) {
    cuda::emu::enqueue(stream, [this] {
      std::unique_lock lock(mutex_);
      opened_.wait(lock, [&] { return open_; });
    });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

}  // namespace aps::testsupport
