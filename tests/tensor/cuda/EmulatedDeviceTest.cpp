// The emulated CUDA device's own guarantees (APS_CUDA_EMULATION=ON, label cuda_emu): device
// memory the host code cannot touch, streams that really run asynchronously and in order,
// events that order streams, and cudaMemcpyAsync's pinned/pageable rules. These are what make
// a missing synchronisation or a host read of device memory fail a test here instead of
// passing by luck, as it would if device memory were host memory.
#include "framework/ops/cuda/Kernels.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"
#include "tests/common/EmuGate.h"
#include "tests/common/ErrorMessage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace aps::cuda {
namespace {

using ::testing::HasSubstr;
using testsupport::errorOf;
using testsupport::Gate;

TEST(EmulatedDevice, HostReadOfDeviceMemoryCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor t = Tensor::zeros({64}, DType::Float32, Device::cuda());
  const volatile float* data = t.data<float>();
  EXPECT_DEATH({ [[maybe_unused]] const float x = data[0]; }, "");
  // Through the runtime's own path the same bytes read fine.
  EXPECT_EQ(t.toFloatVector(), std::vector<float>(64, 0.0f));
}

TEST(EmulatedDevice, HostPointerWhereADevicePointerBelongsIsAnError) {
  std::vector<float> host(16, 1.0f);
  Tensor device = Tensor::zeros({16}, DType::Float32, Device::cuda());
  EXPECT_THAT(errorOf([&] { add(device.data<float>(), host.data(), host.data(), 16); }),
              HasSubstr("is not device memory"));
  float* d = device.data<float>();
  EXPECT_THAT(errorOf([&] { add(d, d, d, int64_t{1} << 26); }), HasSubstr("outside the device allocation"));
}

// A copy into pinned memory is asynchronous: without a synchronisation the host reads what
// was there before (the planted missing synchronisation), after one the device's values.
TEST(EmulatedDevice, PinnedCopyIsOnlyThereAfterTheStreamIsSynchronised) {
  Stream stream;
  const int64_t n = 1000;
  Tensor device = Tensor::zeros({n}, DType::Float32, Device::cuda());
  // The zeros are written on the legacy default stream, which a non-blocking stream does not
  // wait for: without this the fill below may be overwritten (the emulation found it).
  synchronize(0);
  PinnedBuffer pinned(n * sizeof(float));
  std::memset(pinned.data(), 0, n * sizeof(float));
  Gate gate;
  gate.shutOn(stream.handle());
  fillFloatAsync(device.data<float>(), n, 7.0f, stream.handle());
  copyAsync(pinned.data(), device.data<float>(), n * sizeof(float), CopyKind::DeviceToHost, stream.handle());
  const float* host = static_cast<const float*>(pinned.data());
  EXPECT_EQ(host[0], 0.0f);
  EXPECT_EQ(host[n - 1], 0.0f);
  gate.open();
  stream.synchronize();
  EXPECT_EQ(host[0], 7.0f);
  EXPECT_EQ(host[n - 1], 7.0f);
}

// A copy to pageable memory returns when it is done; one from pageable memory stages the
// bytes, so the caller may overwrite its buffer at once.
TEST(EmulatedDevice, PageableCopiesFollowCudaMemcpyAsync) {
  Stream stream;
  const int64_t n = 256;
  Tensor device = Tensor::zeros({n}, DType::Float32, Device::cuda());
  synchronize(0);
  std::vector<float> source(n, 3.0f);
  Gate gate;
  gate.shutOn(stream.handle());
  copyAsync(device.data<float>(), source.data(), n * sizeof(float), CopyKind::HostToDevice, stream.handle());
  std::fill(source.begin(), source.end(), -1.0f);  // after the call: the device must still get 3
  gate.open();
  std::vector<float> back(n, 0.0f);
  copyAsync(back.data(), device.data<float>(), n * sizeof(float), CopyKind::DeviceToHost, stream.handle());
  EXPECT_EQ(back, std::vector<float>(n, 3.0f));  // no synchronisation: a pageable copy is done on return
}

// Streams run side by side; an event recorded on one and waited for on another orders them.
// Without the wait, the second stream's copy reads the buffer before the first stream fills it.
TEST(EmulatedDevice, EventsOrderStreamsAndAMissingWaitReadsStaleData) {
  Stream producer, consumer;
  const int64_t n = 512;
  Tensor a = Tensor::zeros({n}, DType::Float32, Device::cuda());
  Tensor b = Tensor::zeros({n}, DType::Float32, Device::cuda());
  synchronize(0);
  for (const bool wait : {false, true}) {
    fillFloatAsync(a.data<float>(), n, 0.0f, nullptr);
    synchronize(0);
    Gate gate;
    gate.shutOn(producer.handle());
    fillFloatAsync(a.data<float>(), n, 5.0f, producer.handle());
    Event filled;
    filled.record(producer.handle());
    if (wait) filled.wait(consumer.handle());
    copyAsync(b.data<float>(), a.data<float>(), n * sizeof(float), CopyKind::DeviceToDevice, consumer.handle());
    Event copied;
    copied.record(consumer.handle());
    if (!wait) copied.synchronize();  // the consumer is not held up by the shut producer
    gate.open();
    copied.synchronize();
    producer.synchronize();
    EXPECT_EQ(b.toFloatVector(), std::vector<float>(n, wait ? 5.0f : 0.0f)) << "wait = " << wait;
  }
}

// A work item's error is kept and reported by the next synchronisation, as CUDA's are.
TEST(EmulatedDevice, AnErrorOnAStreamIsReportedAtItsSynchronisation) {
  Stream stream;
  emu::enqueue(stream.handle(), [] { APS_FAIL("planted kernel failure"); });
  EXPECT_THAT(errorOf([&] { stream.synchronize(); }), HasSubstr("planted kernel failure"));
  EXPECT_EQ(errorOf([&] { stream.synchronize(); }), "");  // reported once
}

// The caching allocator runs over the emulated cudaMalloc: freed blocks are reused, and the
// device's capacity is what memoryInfo reports.
TEST(EmulatedDevice, CachingAllocatorRunsOverTheEmulatedMalloc) {
  size_t freeBytes = 0, totalBytes = 0;
  memoryInfo(0, &freeBytes, &totalBytes);
  EXPECT_GT(totalBytes, size_t{0});
  EXPECT_LE(freeBytes, totalBytes);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 16}, DType::Float32, Device::cuda());
    first = t.data<float>();
  }
  Tensor again = Tensor::empty({1 << 16}, DType::Float32, Device::cuda());
  EXPECT_EQ(again.data<float>(), first);
  EXPECT_EQ(rawMalloc(totalBytes + 1, 0), nullptr);  // past the device: cudaMalloc's out of memory
  EXPECT_THAT(deviceDescription(0), HasSubstr("emulated"));
}

}  // namespace
}  // namespace aps::cuda
