#pragma once

// The host-emulated CUDA device (APS_CUDA_EMULATION=ON, docs/ARCHITECTURE.md "The emulated
// device"): what the emulated kernels, cuDNN/cuBLAS wrappers and codecs use to reach device
// memory and streams. Nothing outside framework/*/cuda/emu, precision/cuda/emu and comm/emu
// includes it.
//
// Device memory is mapped twice: at the address aps's host code holds (PROT_NONE, so a host
// dereference of a device pointer is a segmentation fault, as on a GPU) and at an alias that
// only emulated kernels and copies reach, through hostView(). Each stream runs its work on its
// own thread, in order; events order streams. So a missing synchronisation gives wrong results
// instead of passing by luck.

#include "framework/tensor/cuda/CudaRuntime.h"

#include <functional>
#include <future>
#include <type_traits>

namespace aps::cuda::emu {

// The address through which emulated device code reaches `bytes` of device memory at
// `device` (nullptr for nullptr). Throws aps::Error when the range is not inside one live
// device allocation: a host pointer passed where a device pointer belongs.
void* hostView(const void* device, size_t bytes);

template <class T>
T* view(T* device, int64_t count) {
  using Raw = std::remove_const_t<T>;
  return static_cast<T*>(hostView(device, static_cast<size_t>(count < 0 ? 0 : count) * sizeof(Raw)));
}

// Queues `work` on `stream` (nullptr: the legacy default stream); it runs on the stream's
// thread after everything queued before it there. An exception it throws is kept and
// rethrown by the next synchronisation of that stream (as a CUDA error is sticky).
void enqueue(StreamHandle stream, std::function<void()> work);

// Queues `work` and waits for it, returning its result or rethrowing its exception on the
// calling thread (for the calls that return a value to the host, as crossEntropyForward).
template <class F>
auto runAndWait(StreamHandle stream, F work) -> decltype(work()) {
  auto task = std::make_shared<std::packaged_task<decltype(work())()>>(std::move(work));
  auto result = task->get_future();
  enqueue(stream, [task] { (*task)(); });
  return result.get();
}

// True when [data, data + bytes) lies in page-locked memory from PinnedBuffer.
bool isPinned(const void* data, size_t bytes);

// Bytes copied between host and device memory (either way) by this process so far: what a
// test of device-resident work counts.
uint64_t hostDeviceBytesCopied();

}  // namespace aps::cuda::emu
