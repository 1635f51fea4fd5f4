#include "framework/tensor/cuda/CudaAllocator.h"

#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::cuda {

CudaAllocator::CudaAllocator(Backend backend) : backend_(std::move(backend)) {}

CudaAllocator::~CudaAllocator() { emptyCache(); }

CudaAllocator& CudaAllocator::instance() {
  // Never destroyed: tensors in static objects may be released during exit, after the
  // CUDA runtime has begun to shut down.
  static CudaAllocator* allocator = new CudaAllocator(Backend{rawMalloc, rawFree});
  return *allocator;
}

CudaAllocator::DevicePool& CudaAllocator::pool(int device) {
  APS_CHECK(device >= 0 && device < 1024, "CudaAllocator: device index {} is out of range", device);
  if (static_cast<size_t>(device) >= pools_.size()) pools_.resize(static_cast<size_t>(device) + 1);
  return pools_[static_cast<size_t>(device)];
}

void* CudaAllocator::allocate(size_t bytes, int device) {
  const size_t rounded = roundUp(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  DevicePool& p = pool(device);
  void* stream = currentStream();
  void* data = nullptr;
  size_t size = rounded;
  // The smallest block cached for this stream that fits, if it wastes at most a quarter of itself.
  std::multimap<size_t, void*>& cached = p.free[stream];
  auto it = cached.lower_bound(rounded);
  if (it != cached.end() && it->first - rounded <= it->first / 4) {
    size = it->first;
    data = it->second;
    cached.erase(it);
    p.stats.cachedBytes -= size;
    ++p.stats.cacheHits;
  } else {
    data = backend_.malloc(rounded, device);
    if (data == nullptr && p.stats.cachedBytes > 0) {
      ++p.stats.outOfMemoryRetries;
      emptyPoolLocked(device, p);
      data = backend_.malloc(rounded, device);
    }
    APS_CHECK(data != nullptr,
              "cuda:{} is out of memory allocating {} bytes ({} bytes in live tensors, peak {}; nothing cached left "
              "to free)",
              device, rounded, p.stats.allocatedBytes, p.stats.peakAllocatedBytes);
    ++p.stats.deviceMallocs;
    p.stats.reservedBytes += rounded;
  }
  p.live.emplace(data, LiveBlock{size, stream});
  p.stats.allocatedBytes += size;
  if (p.stats.allocatedBytes > p.stats.peakAllocatedBytes) p.stats.peakAllocatedBytes = p.stats.allocatedBytes;
  return data;
}

void CudaAllocator::release(void* data, size_t /*bytes*/, int device) {
  if (data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  DevicePool& p = pool(device);
  auto it = p.live.find(data);
  APS_CHECK(it != p.live.end(), "CudaAllocator: release of a pointer this allocator did not hand out on cuda:{}",
            device);
  const LiveBlock block = it->second;
  p.live.erase(it);
  p.stats.allocatedBytes -= block.size;
  p.stats.cachedBytes += block.size;
  p.free[block.stream].emplace(block.size, data);
}

void CudaAllocator::emptyPoolLocked(int device, DevicePool& p) {
  for (auto& [stream, blocks] : p.free) {
    for (auto& [size, data] : blocks) {
      backend_.free(data, device);
      ++p.stats.deviceFrees;
      p.stats.reservedBytes -= size;
    }
  }
  p.free.clear();
  p.stats.cachedBytes = 0;
}

void CudaAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t d = 0; d < pools_.size(); ++d) emptyPoolLocked(static_cast<int>(d), pools_[d]);
}

AllocatorStats CudaAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= pools_.size()) return {};
  return pools_[static_cast<size_t>(device)].stats;
}

void CudaAllocator::resetPeak(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  DevicePool& p = pool(device);
  p.stats.peakAllocatedBytes = p.stats.allocatedBytes;
}

}  // namespace aps::cuda
