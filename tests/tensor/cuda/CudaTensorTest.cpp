// Tensors in device memory: allocation through the caching allocator, copies both ways,
// fills, element access. Runs on a machine with a GPU (label cuda); skipped elsewhere.
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using aps::Device;
using aps::DType;
using aps::Tensor;

#define REQUIRE_GPU() \
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaTensor, RoundTripsThroughTheDeviceBitForBit) {
  REQUIRE_GPU();
  std::vector<float> values(10000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.37f - 1000.0f;
  const Tensor host = Tensor::fromVector(values, {100, 100});
  const Tensor device = host.to(Device::cuda());
  EXPECT_TRUE(device.device().isCuda());
  EXPECT_EQ(device.sizes(), host.sizes());
  EXPECT_EQ(device.toFloatVector(), values);
  EXPECT_EQ(device.clone().to(Device::cpu()).toFloatVector(), values);  // device-to-device copy
  // A strided cpu view is gathered before it goes up.
  const Tensor column = host.transpose(0, 1);
  EXPECT_EQ(column.to(Device::cuda()).toFloatVector(), column.toFloatVector());
  EXPECT_FLOAT_EQ(static_cast<float>(device.value({3, 7})), values[307]);
}

TEST(CudaTensor, FillsZerosAndSetsElements) {
  REQUIRE_GPU();
  Tensor t = Tensor::zeros({1000}, DType::Float32, Device::cuda());
  EXPECT_EQ(t.toFloatVector(), std::vector<float>(1000, 0.0f));
  t.fill(2.5);
  EXPECT_EQ(t.toFloatVector(), std::vector<float>(1000, 2.5f));
  t.setValue({999}, -1.0);
  EXPECT_EQ(t.value({999}), -1.0);
  Tensor ints = Tensor::zeros({3}, DType::Int64, Device::cuda());
  ints.setValue({1}, 9007199254740993.0);  // 2^53 + 1 rounds in double; stored as written
  EXPECT_EQ(ints.toVector<int64_t>()[0], 0);
}

TEST(CudaTensor, FreedMemoryIsReusedByTheNextStep) {
  REQUIRE_GPU();
  auto& allocator = aps::cuda::CudaAllocator::instance();
  { Tensor warm = Tensor::empty({1 << 20}, DType::Float32, Device::cuda()); }
  const auto before = allocator.stats(0);
  { Tensor again = Tensor::empty({1 << 20}, DType::Float32, Device::cuda()); }
  const auto after = allocator.stats(0);
  EXPECT_EQ(after.deviceMallocs, before.deviceMallocs);
  EXPECT_EQ(after.cacheHits, before.cacheHits + 1);
}

TEST(CudaTensor, StreamsAndEventsOrderWork) {
  REQUIRE_GPU();
  aps::cuda::Stream stream;
  aps::cuda::Event start(true), stop(true);
  Tensor t = Tensor::empty({1 << 22}, DType::Float32, Device::cuda());
  start.record(stream.handle());
  aps::cuda::fillFloatAsync(t.data<float>(), t.numel(), 3.0f, stream.handle());
  stop.record(stream.handle());
  stop.synchronize();
  EXPECT_TRUE(stop.done());
  EXPECT_GE(stop.millisecondsSince(start), 0.0f);
  EXPECT_EQ(t.value({12345}), 3.0);
  aps::cuda::PinnedBuffer pinned(1024);
  EXPECT_NE(pinned.data(), nullptr);
}

TEST(CudaTensor, AMissingDeviceIndexIsNamed) {
  REQUIRE_GPU();
  EXPECT_ERROR_NAMES(Tensor::empty({4}, DType::Float32, Device::cuda(aps::cuda::deviceCount())), "does not exist");
}

}  // namespace
