// The loader's batches on the emulated GPU (label cuda_emu): the copy stream and the compute
// stream are ordered by events only, so these tests hold one stream with a gate and check that
// the other waits where it must. Without the event wait in take() the compute stream reads the
// batch before its copy; without the one in stage() a copy overwrites a batch that queued
// compute has not read yet.
#include "framework/train/DeviceBatches.h"

#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/EmuGate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace aps::train {
namespace {

using testsupport::Gate;

data::Batch batchOf(float first, int64_t n) {
  data::Batch b;
  for (int64_t i = 0; i < n; ++i) b.images.push_back(first + static_cast<float>(i));
  b.imageShape = {n, 1, 1, 1};
  for (int64_t i = 0; i < n; ++i) b.labels.push_back(static_cast<int64_t>(first) + i % 10);
  b.labelShape = {n};
  for (int64_t i = 0; i < n; ++i) b.indices.push_back(i);
  return b;
}

class DeviceBatchesTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(APS_CUDA_EMULATION)
    GTEST_SKIP() << "the gates need the emulated device";
#endif
  }
};

TEST_F(DeviceBatchesTest, ComputeWaitsForTheCopyOfItsBatch) {
  constexpr int64_t n = 4096;
  DeviceBatches batches(Device::cuda(), 1);
  Gate copyHeld;
  copyHeld.shutOn(batches.copyStream());
  batches.stage({batchOf(1.0f, n)});
  const auto [images, labels] = batches.take(0);
  cuda::PinnedBuffer host(n * sizeof(float));
  cuda::copyAsync(host.data(), images.rawData(), n * sizeof(float), cuda::CopyKind::DeviceToHost, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the compute stream's chance to run early
  copyHeld.open();
  cuda::synchronize(0);
  const auto* values = static_cast<const float*>(host.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(values[i], 1.0f + static_cast<float>(i)) << i;
  EXPECT_EQ(labels.to(Device::cpu()).data<int64_t>()[3], 4);
  batches.release();
}

TEST_F(DeviceBatchesTest, ASlotIsRefilledOnlyAfterTheComputeThatReadsIt) {
  constexpr int64_t n = 4096;
  DeviceBatches batches(Device::cuda(), 1);
  batches.stage({batchOf(1.0f, n)});    // step k: slot 0
  batches.stage({batchOf(100.0f, n)});  // step k + 1: slot 1
  const Tensor k = batches.take(0).first;
  Gate computeHeld;
  computeHeld.shutOn(nullptr);
  cuda::PinnedBuffer host(n * sizeof(float));
  cuda::copyAsync(host.data(), k.rawData(), n * sizeof(float), cuda::CopyKind::DeviceToHost, nullptr);
  batches.release();
  batches.stage({batchOf(5000.0f, n)});                        // step k + 2: slot 0 again, while step k's read is held
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the copy stream's chance to run early
  computeHeld.open();
  cuda::synchronize(0);
  const auto* values = static_cast<const float*>(host.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(values[i], 1.0f + static_cast<float>(i)) << i;
  EXPECT_EQ(batches.take(0).first.toFloatVector()[0], 100.0f);  // step k + 1 is next
  batches.release();
  EXPECT_EQ(batches.take(0).first.toFloatVector()[0], 5000.0f);
  batches.release();
}

TEST_F(DeviceBatchesTest, MisuseIsAnError) {
  DeviceBatches batches(Device::cuda(), 2);
  EXPECT_THROW(batches.take(0), Error);
  EXPECT_THROW(batches.stage({batchOf(1.0f, 4)}), Error);  // one batch for two ranks
  batches.stage({batchOf(1.0f, 4), batchOf(2.0f, 4)});
  batches.stage({batchOf(1.0f, 4), batchOf(2.0f, 4)});
  EXPECT_THROW(batches.stage({batchOf(1.0f, 4), batchOf(2.0f, 4)}), Error);  // both slots busy
  batches.discardStaged();
  EXPECT_FALSE(batches.staged());
}

}  // namespace
}  // namespace aps::train
