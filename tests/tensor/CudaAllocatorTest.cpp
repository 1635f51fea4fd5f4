// The caching policy of the device allocator, run on the host: the raw allocator is
// replaced by host memory with a budget, so reuse, statistics and the out-of-memory retry are
// proven without a GPU. (A tensor on a real device is tested in cuda/CudaTensorTest.cpp.)
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>

namespace {

using aps::cuda::CudaAllocator;

struct FakeDevice {
  size_t budget = size_t{1} << 30;
  size_t used = 0;
  std::map<void*, size_t> live;
  CudaAllocator::Backend backend() {
    return {[this](size_t bytes, int) -> void* {
              if (used + bytes > budget) return nullptr;
              used += bytes;
              void* p = std::malloc(bytes);
              live[p] = bytes;
              return p;
            },
            [this](void* p, int) {
              used -= live.at(p);
              live.erase(p);
              std::free(p);
            }};
  }
};

TEST(CudaAllocator, ReusesFreedBlocksAndCountsWhatItHolds) {
  FakeDevice device;
  {
    CudaAllocator allocator(device.backend());
    void* a = allocator.allocate(1000, 0);  // rounded to 1024
    auto s = allocator.stats(0);
    EXPECT_EQ(s.allocatedBytes, 1024u);
    EXPECT_EQ(s.reservedBytes, 1024u);
    EXPECT_EQ(s.deviceMallocs, 1);
    allocator.release(a, 1000, 0);
    s = allocator.stats(0);
    EXPECT_EQ(s.allocatedBytes, 0u);
    EXPECT_EQ(s.cachedBytes, 1024u);
    // The same size comes back from the cache, without a device call.
    void* b = allocator.allocate(1024, 0);
    EXPECT_EQ(b, a);
    s = allocator.stats(0);
    EXPECT_EQ(s.deviceMallocs, 1);
    EXPECT_EQ(s.cacheHits, 1);
    EXPECT_EQ(s.peakAllocatedBytes, 1024u);
    allocator.release(b, 1024, 0);
    // A block four times the request would waste too much: a fresh one is taken.
    void* big = allocator.allocate(4096, 0);
    allocator.release(big, 4096, 0);
    void* small = allocator.allocate(1024, 0);
    EXPECT_EQ(small, a);  // the best fit, not the big block
    void* other = allocator.allocate(1024, 0);
    EXPECT_NE(other, big);
    EXPECT_EQ(allocator.stats(0).deviceMallocs, 3);
    allocator.release(small, 1024, 0);
    allocator.release(other, 1024, 0);
    allocator.emptyCache();
    s = allocator.stats(0);
    EXPECT_EQ(s.reservedBytes, 0u);
    EXPECT_EQ(s.cachedBytes, 0u);
    EXPECT_EQ(device.live.size(), 0u);
  }
}

TEST(CudaAllocator, DevicesHaveTheirOwnPools) {
  FakeDevice device;
  CudaAllocator allocator(device.backend());
  void* a = allocator.allocate(512, 0);
  allocator.release(a, 512, 0);
  void* b = allocator.allocate(512, 1);
  EXPECT_NE(a, b);  // cuda:0's cached block is not handed to cuda:1
  EXPECT_EQ(allocator.stats(1).deviceMallocs, 1);
  EXPECT_EQ(allocator.stats(0).cachedBytes, 512u);
  allocator.release(b, 512, 1);
}

// A block freed while work queued on its stream may still use it is handed again only to that
// stream (whose next work runs after it), never to another thread's stream; out of memory, the
// other stream's cache is returned too.
TEST(CudaAllocator, StreamsHaveTheirOwnPools) {
  FakeDevice device;
  device.budget = 4096;
  CudaAllocator allocator(device.backend());
  auto* comm = reinterpret_cast<aps::cuda::StreamHandle>(std::uintptr_t{0x40});  // a handle, never used
  void* onComm = nullptr;
  {
    aps::cuda::StreamGuard guard(comm);
    EXPECT_EQ(aps::cuda::currentStream(), comm);
    onComm = allocator.allocate(1024, 0);
    allocator.release(onComm, 1024, 0);
  }
  EXPECT_EQ(aps::cuda::currentStream(), nullptr);  // the guard's scope ended
  void* onCompute = allocator.allocate(1024, 0);
  EXPECT_NE(onCompute, onComm);  // the communication stream's cached block stays its own
  allocator.release(onCompute, 1024, 0);
  {
    aps::cuda::StreamGuard guard(comm);
    EXPECT_EQ(allocator.allocate(1024, 0), onComm);  // the same stream gets it back
    allocator.release(onComm, 1024, 0);
  }
  EXPECT_EQ(allocator.stats(0).cacheHits, 1);
  EXPECT_EQ(allocator.stats(0).cachedBytes, 2048u);
  // 2048 of 4096 bytes are cached, half of them for each stream: 3072 fit once both are returned.
  void* big = allocator.allocate(3072, 0);
  EXPECT_EQ(allocator.stats(0).outOfMemoryRetries, 1);
  EXPECT_EQ(allocator.stats(0).cachedBytes, 0u);
  allocator.release(big, 3072, 0);
}

TEST(CudaAllocator, OutOfMemoryFreesTheCacheRetriesThenNamesTheRequest) {
  FakeDevice device;
  device.budget = 8192;
  CudaAllocator allocator(device.backend());
  void* a = allocator.allocate(4096, 0);
  void* b = allocator.allocate(2048, 0);
  allocator.release(b, 2048, 0);          // 2048 cached, 6144 of 8192 reserved
  void* c = allocator.allocate(4096, 0);  // fits only after the cache is returned
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(allocator.stats(0).outOfMemoryRetries, 1);
  EXPECT_EQ(allocator.stats(0).reservedBytes, 8192u);
  EXPECT_ERROR_NAMES(allocator.allocate(100, 0), "cuda:0 is out of memory allocating 512 bytes");
  allocator.release(a, 4096, 0);
  allocator.release(c, 4096, 0);
  EXPECT_ERROR_NAMES(allocator.release(&device, 8, 0), "did not hand out");
}

TEST(CudaTensor, ACudaTensorWithoutADeviceIsRefusedWithTheReason) {
  if (aps::cuda::deviceCount() > 0) GTEST_SKIP() << "a CUDA device is present (cuda/CudaTensorTest.cpp covers it)";
  const std::string error =
      aps::testsupport::errorOf([] { aps::Tensor::empty({4}, aps::DType::Float32, aps::Device::cuda()); });
  if (aps::cuda::compiledWithCuda()) {
    EXPECT_NE(error.find("a tensor on cuda: no CUDA device is visible"), std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("a tensor on cuda: this build of aps has no CUDA backend"), std::string::npos) << error;
  }
}

}  // namespace
