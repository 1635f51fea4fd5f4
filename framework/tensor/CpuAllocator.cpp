#include "framework/tensor/CpuAllocator.h"

#include <cstdlib>
#include <new>

namespace aps {

CpuAllocator& CpuAllocator::instance() {
  // Never destroyed: tensors in static objects may be released during exit.
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

void* CpuAllocator::allocate(size_t bytes) {
  const size_t rounded = roundUp(bytes);
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= rounded;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, rounded);
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
  }
  std::free(data);
}

void CpuAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) std::free(p);
  }
  free_.clear();
  cached_ = 0;
}

void CpuAllocator::setCacheLimit(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    if (cached_ <= limit_) return;
  }
  emptyCache();
}

size_t CpuAllocator::cachedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace aps
