#include "framework/tensor/cuda/CudaRuntime.h"

#include "framework/tensor/cuda/CudaCheck.h"
#include "framework/tensor/cuda/Launch.cuh"

#include <cuda_runtime.h>

#include <utility>

namespace aps::cuda {

namespace {
__global__ void fillKernel(float* out, int64_t n, float value) {
  for (int64_t i = launch::firstIndex(); i < n; i += launch::gridStride()) out[i] = value;
}

__global__ void addKernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = launch::firstIndex(); i < n; i += launch::gridStride()) out[i] = (a ? a[i] : 0.0f) + b[i];
}

template <class Element>
__global__ void stridedCopyKernel(Element* dst, StridedLayout dstLayout, const Element* src, StridedLayout srcLayout,
                                  int64_t n) {
  for (int64_t i = launch::firstIndex(); i < n; i += launch::gridStride()) {
    dst[stridedOffset(dstLayout, i)] = src[stridedOffset(srcLayout, i)];
  }
}

cudaStream_t stream(StreamHandle handle) { return static_cast<cudaStream_t>(handle); }

cudaMemcpyKind memcpyKind(CopyKind kind) {
  switch (kind) {
    case CopyKind::HostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::DeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::DeviceToDevice:
      break;
  }
  return cudaMemcpyDeviceToDevice;
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

int computeCapability(int index) {
  int major = 0, minor = 0;
  APS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  APS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  return major * 10 + minor;
}

void setDevice(int index) { APS_CUDA_CHECK(cudaSetDevice(index)); }

int currentDevice() {
  int index = 0;
  APS_CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

void synchronize(int index) {
  APS_CUDA_CHECK(cudaSetDevice(index));
  APS_CUDA_CHECK(cudaDeviceSynchronize());
}

void* rawMalloc(size_t bytes, int index) {
  APS_CUDA_CHECK(cudaSetDevice(index));
  void* data = nullptr;
  const cudaError_t status = cudaMalloc(&data, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but clear it so the next check does not see it
    return nullptr;
  }
  APS_CUDA_CHECK(status);
  return data;
}

void rawFree(void* data, int index) {
  if (data == nullptr) return;
  APS_CUDA_CHECK(cudaSetDevice(index));
  APS_CUDA_CHECK(cudaFree(data));
}

void memoryInfo(int index, size_t* freeBytes, size_t* totalBytes) {
  APS_CUDA_CHECK(cudaSetDevice(index));
  APS_CUDA_CHECK(cudaMemGetInfo(freeBytes, totalBytes));
}

void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle s) {
  if (bytes == 0) return;
  APS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpyKind(kind), stream(s)));
}

void copySync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle s) {
  if (bytes == 0) return;
  if (s == nullptr) {
    APS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, memcpyKind(kind)));
    return;
  }
  APS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpyKind(kind), stream(s)));
  APS_CUDA_CHECK(cudaStreamSynchronize(stream(s)));
}

void synchronizeStream(StreamHandle s) { APS_CUDA_CHECK(cudaStreamSynchronize(stream(s))); }

void zeroAsync(void* data, size_t bytes, StreamHandle s) {
  if (bytes == 0) return;
  APS_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream(s)));
}

void fillFloatAsync(float* device, int64_t n, float value, StreamHandle s) {
  if (n <= 0) return;
  fillKernel<<<launch::gridFor(n), launch::kThreads, 0, stream(s)>>>(device, n, value);
  APS_CUDA_CHECK(cudaGetLastError());
}

void addFloatsAsync(float* out, const float* a, const float* b, int64_t n, StreamHandle s) {
  if (n <= 0) return;
  addKernel<<<launch::gridFor(n), launch::kThreads, 0, stream(s)>>>(out, a, b, n);
  APS_CUDA_CHECK(cudaGetLastError());
}

void stridedCopyAsync(void* dst, const StridedLayout& dstLayout, const void* src, const StridedLayout& srcLayout,
                      int64_t n, size_t elementSize, StreamHandle s) {
  if (n <= 0) return;
  const unsigned grid = launch::gridFor(n);
  switch (elementSize) {
    case 1:
      stridedCopyKernel<<<grid, launch::kThreads, 0, stream(s)>>>(static_cast<uint8_t*>(dst), dstLayout,
                                                                  static_cast<const uint8_t*>(src), srcLayout, n);
      break;
    case 2:
      stridedCopyKernel<<<grid, launch::kThreads, 0, stream(s)>>>(static_cast<uint16_t*>(dst), dstLayout,
                                                                  static_cast<const uint16_t*>(src), srcLayout, n);
      break;
    case 4:
      stridedCopyKernel<<<grid, launch::kThreads, 0, stream(s)>>>(static_cast<uint32_t*>(dst), dstLayout,
                                                                  static_cast<const uint32_t*>(src), srcLayout, n);
      break;
    default:
      stridedCopyKernel<<<grid, launch::kThreads, 0, stream(s)>>>(static_cast<uint64_t*>(dst), dstLayout,
                                                                  static_cast<const uint64_t*>(src), srcLayout, n);
      break;
  }
  APS_CUDA_CHECK(cudaGetLastError());
}

void fillOnDevice(float* host, int64_t n, float value, int index) {
  if (n <= 0) return;
  APS_CUDA_CHECK(cudaSetDevice(index));
  float* device = nullptr;
  APS_CUDA_CHECK(cudaMalloc(&device, static_cast<size_t>(n) * sizeof(float)));
  fillKernel<<<launch::gridFor(n), launch::kThreads>>>(device, n, value);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess)
    status = cudaMemcpy(host, device, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  APS_CUDA_CHECK(status);
}

Stream::Stream(int device) : device_(device) {
  APS_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  APS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_ != nullptr) cudaStreamDestroy(stream(handle_));
}

void Stream::synchronize() const { APS_CUDA_CHECK(cudaStreamSynchronize(stream(handle_))); }

Event::Event(bool timing) {
  cudaEvent_t e = nullptr;
  APS_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  handle_ = e;
}

Event::~Event() {
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void Event::record(StreamHandle s) { APS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), stream(s))); }

void Event::wait(StreamHandle s) const {
  APS_CUDA_CHECK(cudaStreamWaitEvent(stream(s), static_cast<cudaEvent_t>(handle_), 0));
}

void Event::synchronize() const { APS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_))); }

bool Event::done() const {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  APS_CUDA_CHECK(status);
  return true;
}

float Event::millisecondsSince(const Event& start) const {
  float ms = 0.0f;
  APS_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_), static_cast<cudaEvent_t>(handle_)));
  return ms;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) APS_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace aps::cuda
