#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace aps::cuda {

// What the caching allocator has done on one device (the trainer logs it; tests check it).
struct AllocatorStats {
  size_t allocatedBytes = 0;      // in live tensors (rounded sizes)
  size_t peakAllocatedBytes = 0;  // the most allocatedBytes has been
  size_t reservedBytes = 0;       // obtained from the device: live + cached
  size_t cachedBytes = 0;         // freed by tensors, kept for reuse
  int64_t deviceMallocs = 0;      // calls to the raw allocator
  int64_t deviceFrees = 0;
  int64_t cacheHits = 0;  // allocations served from the cache
  int64_t outOfMemoryRetries = 0;
};

// A caching allocator for device memory (PyTorch's idea, kept small). cudaMalloc and cudaFree
// synchronise the device and cost tens of microseconds; a training step allocates the same
// activation and gradient sizes every iteration, so freed blocks are kept per device in a
// size-ordered pool and reused for any request they fit without wasting more than a quarter
// of themselves. Sizes are rounded up to 512 bytes (the alignment cuDNN and vector loads
// want). When the device is out of memory the pool is returned to the device and the
// request retried once; a second failure throws aps::Error with the request and the
// statistics. Never managed memory.
//
// Reuse is safe in stream order: a block is allocated for the calling thread's current stream
// (cuda::currentStream(): the compute stream, where every kernel that touches a tensor runs, or
// the reducer's communication stream), and once freed it is handed again only to a request for
// that stream, whose next work runs after the work queued on it so far. A block freed while a
// kernel of the compute stream may still use it is therefore never given to the communication
// stream, nor the other way round.
//
// The raw allocator is injectable so that the caching policy is tested on machines without
// a GPU; instance() uses cudaMalloc/cudaFree.
class CudaAllocator {
 public:
  static constexpr size_t kRound = 512;

  struct Backend {
    std::function<void*(size_t bytes, int device)> malloc;  // nullptr when out of memory
    std::function<void(void* data, int device)> free;
  };

  explicit CudaAllocator(Backend backend);
  ~CudaAllocator();
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  static CudaAllocator& instance();

  void* allocate(size_t bytes, int device);
  void release(void* data, size_t bytes, int device);

  void emptyCache();  // returns every cached block to the device
  AllocatorStats stats(int device) const;
  void resetPeak(int device);

  static size_t roundUp(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

 private:
  struct LiveBlock {
    size_t size = 0;         // the block's (the request may be smaller)
    void* stream = nullptr;  // the StreamHandle it was allocated for
  };
  struct DevicePool {
    std::map<void*, std::multimap<size_t, void*>> free;  // stream -> block size -> block
    std::map<void*, LiveBlock> live;                     // block -> its size and stream
    AllocatorStats stats;
  };
  DevicePool& pool(int device);
  void emptyPoolLocked(int device, DevicePool& pool);

  Backend backend_;
  mutable std::mutex mutex_;
  std::vector<DevicePool> pools_;
};

// Device scratch from the caching allocator for the length of one call (a workspace, 16-bit
// copies of operands): released at scope end while the work that uses it may still be queued,
// which is safe in stream order (above).
class DeviceScratch {
 public:
  DeviceScratch(size_t bytes, int device) : bytes_(bytes), device_(device) {
    if (bytes_ > 0) data_ = CudaAllocator::instance().allocate(bytes_, device_);
  }
  ~DeviceScratch() { CudaAllocator::instance().release(data_, bytes_, device_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace aps::cuda
