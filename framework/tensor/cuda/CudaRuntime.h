#pragma once

// The CUDA runtime as aps uses it: devices, raw device memory, copies, streams, events and
// pinned host memory. This header needs no CUDA headers, so CPU-only code can call it; in a
// build without the CUDA backend every function that needs a GPU throws aps::Error saying so
// (CudaRuntimeStub.cpp), and deviceCount() is 0.

#include "framework/core/HostDevice.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace aps::cuda {

// True when this build contains the CUDA backend (APS_WITH_CUDA found the toolkit).
bool compiledWithCuda();

// Number of usable CUDA devices; 0 when the build has no CUDA or the machine no GPU.
int deviceCount();

// A one-line description of device `index` ("NVIDIA H200, sm_90, 139 GiB").
std::string deviceDescription(int index);
// Device `index`'s compute capability as major * 10 + minor (90 for sm_90); 0 for the
// host-emulated device, which has none.
int computeCapability(int index);

// Throws aps::Error when `index` does not name a usable device, saying why (no CUDA in this
// build, no GPU visible, index out of range); `what` names the setting that asked for it.
void requireDevice(int index, const std::string& what);

void setDevice(int index);
int currentDevice();          // the calling thread's device (cudaGetDevice)
void synchronize(int index);  // waits for all work on the device

// Raw device memory (cudaMalloc; never managed memory). rawMalloc returns nullptr when the
// device is out of memory (the caching allocator then frees its cache and retries) and
// throws on any other error.
void* rawMalloc(size_t bytes, int index);
void rawFree(void* data, int index);
// Free and total memory of the device, in bytes.
void memoryInfo(int index, size_t* freeBytes, size_t* totalBytes);

}  // namespace aps::cuda

struct CUstream_st;  // what cudaStream_t points to

namespace aps::cuda {

// A stream handle: a cudaStream_t, usable without CUDA's headers; nullptr is the legacy
// default stream.
using StreamHandle = CUstream_st*;

// The stream the calling thread queues its device work on: nullptr (the legacy default
// stream, where aps's ops run) unless a StreamGuard on this thread names another. The gradient
// reducer's communication thread queues the reduction on its communication stream this way, so
// that the codecs, schedules and transports it calls need no stream argument.
StreamHandle currentStream();
// Makes `stream` the calling thread's current stream for its lifetime.
class StreamGuard {
 public:
  explicit StreamGuard(StreamHandle stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  StreamHandle previous_;
};

// Waits until the work queued on `stream` so far has run.
void synchronizeStream(StreamHandle stream);

enum class CopyKind : uint8_t { HostToDevice, DeviceToHost, DeviceToDevice };
// Asynchronous on `stream` (synchronous with the host when host memory is not pinned, as
// cudaMemcpyAsync is); copySync queues it on `stream` (the calling thread's current one) and
// waits for that stream to finish it.
void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream);
void copySync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream = currentStream());
void zeroAsync(void* data, size_t bytes, StreamHandle stream);
// n floats at `device` (device memory) set to `value` by a kernel on `stream`.
void fillFloatAsync(float* device, int64_t n, float value, StreamHandle stream);
// out[i] = a[i] + b[i] over n device floats, or 0 + b[i] when a is nullptr (out may alias
// either): the engine's gradient accumulation (framework/autograd/GradAccumulation.h), the
// one arithmetic below the op kernels, with the CPU's bits.
void addFloatsAsync(float* out, const float* a, const float* b, int64_t n, StreamHandle stream);

// The layout of a view for a device copy: sizes and strides in elements, at most 8 dimensions.
struct StridedLayout {
  static constexpr int kMaxDims = 8;
  int32_t dims = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};
// The element offset of the i-th element (row-major order) of a view.
APS_HOST_DEVICE inline int64_t stridedOffset(const StridedLayout& layout, int64_t i) {
  int64_t offset = 0;
  for (int32_t d = layout.dims - 1; d >= 0; --d) {
    offset += (i % layout.sizes[d]) * layout.strides[d];
    i /= layout.sizes[d];
  }
  return offset;
}
// Copies the n elements (of elementSize bytes: 1, 2, 4 or 8) of a view on the device to another
// view of the same shape there; src and dst point at the views' first elements. The views must
// not overlap (Tensor::copyFrom goes through a temporary when they share storage).
void stridedCopyAsync(void* dst, const StridedLayout& dstLayout, const void* src, const StridedLayout& srcLayout,
                      int64_t n, size_t elementSize, StreamHandle stream);

// Fills n floats of host memory with `value` by running a kernel on device `index`
// (device buffer, kernel, copy back): the smallest end-to-end proof the backend works.
void fillOnDevice(float* host, int64_t n, float value, int index = 0);

// A CUDA stream owned by this object (cudaStreamNonBlocking).
class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamHandle handle() const { return handle_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  StreamHandle handle_ = nullptr;
  int device_ = 0;
};

// A CUDA event: orders work across streams (the communication stream waits for the event
// recorded after the backward kernels that produced a bucket) and times it.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle stream);
  void wait(StreamHandle stream) const;  // work later queued on `stream` waits for this event
  void synchronize() const;
  bool done() const;
  float millisecondsSince(const Event& start) const;  // both recorded with timing = true

 private:
  [[maybe_unused]] void* handle_ = nullptr;  // cudaEvent_t (unused in a build without CUDA)
};

// Page-locked host memory (cudaHostAlloc), for the loader's batches: copies from it to the
// device run asynchronously and at full PCIe/NVLink speed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace aps::cuda
