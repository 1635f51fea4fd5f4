#include "framework/tensor/CpuAllocator.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace aps {

namespace {

// Small tensors (below kMinCachedBytes) come from the C allocator, and a step frees and
// allocates the same sizes again. glibc's defaults give the top of the heap back to the
// kernel whenever 128 KiB there are free and map every block of 128 KiB or more on its own:
// at one image per simulated rank that was a trim and a round of page faults per op, 5-12%
// of a ResNet-20 step (aps_bench_train --batch 1). Keep freed memory for reuse instead; the
// peak stays that of the step's live tensors.
void keepFreedMemory() {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 4 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

// The calling thread's cache of small blocks: bin i holds blocks of (i + 1) * kAlignment
// bytes. Its destructor (at the thread's end) frees them; a block released after that, by a
// static object during exit, goes straight back to the C allocator.
constexpr size_t kBins = CpuAllocator::kMinCachedBytes / CpuAllocator::kAlignment;
thread_local bool tCacheGone = false;
struct ThreadCache {
  std::array<std::vector<void*>, kBins> bins;
  size_t bytes = 0;
  std::vector<void*>& bin(size_t rounded) { return bins[rounded / CpuAllocator::kAlignment - 1]; }
  void clear() {
    for (auto& bin : bins) {
      for (void* p : bin) std::free(p);
      bin.clear();
    }
    bytes = 0;
  }
  ~ThreadCache() {
    clear();
    tCacheGone = true;
  }
};
// The last of `blocks` (of `rounded` bytes each), taken off the `held` count; null if none.
void* takeBlock(std::vector<void*>& blocks, size_t& held, size_t rounded) {
  if (blocks.empty()) return nullptr;
  void* p = blocks.back();
  blocks.pop_back();
  held -= rounded;
  return p;
}

ThreadCache* threadCache() {
  if (tCacheGone) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

}  // namespace

CpuAllocator& CpuAllocator::instance() {
  // Never destroyed: tensors in static objects may be released during exit.
  static CpuAllocator* allocator = [] {
    keepFreedMemory();
    return new CpuAllocator();
  }();
  return *allocator;
}

void* CpuAllocator::allocate(size_t bytes) {
  const size_t rounded = roundUp(bytes);
  void* p = nullptr;
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(rounded);
    if (it != free_.end()) p = takeBlock(it->second, cached_, rounded);
  } else if (rounded > 0) {
    if (ThreadCache* cache = threadCache()) p = takeBlock(cache->bin(rounded), cache->bytes, rounded);
  }
  if (p != nullptr) return p;
  fresh_.fetch_add(1, std::memory_order_relaxed);
  p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    emptyCache();  // give cached memory back and try once more
    p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
  }
  return p;
}

void CpuAllocator::release(void* data, size_t bytes) {
  if (data == nullptr) return;
  const size_t rounded = roundUp(bytes);
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + rounded <= limit_) {
      free_[rounded].push_back(data);
      cached_ += rounded;
      return;
    }
  } else if (rounded > 0) {
    ThreadCache* cache = threadCache();
    if (cache != nullptr && cache->bytes + rounded <= std::min(kThreadCacheBytes, limit_.load())) {
      cache->bin(rounded).push_back(data);
      cache->bytes += rounded;
      return;
    }
  }
  std::free(data);
}

void CpuAllocator::emptyCache() {
  if (ThreadCache* cache = threadCache()) cache->clear();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) std::free(p);
  }
  free_.clear();
  cached_ = 0;
}

void CpuAllocator::setCacheLimit(size_t bytes) {
  const ThreadCache* cache = threadCache();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    if (cached_ <= bytes && (cache == nullptr || cache->bytes <= bytes)) return;
  }
  emptyCache();
}

size_t CpuAllocator::cachedBytes() const {
  const ThreadCache* cache = threadCache();
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_ + (cache != nullptr ? cache->bytes : 0);
}

}  // namespace aps
