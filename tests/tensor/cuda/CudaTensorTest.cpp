// Tensors in device memory: allocation through the caching allocator, copies both ways,
// fills, element access. Runs on a machine with a GPU (label cuda); skipped elsewhere.
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <utility>
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

// Views on the device are copied by a kernel: gathered into contiguous tensors, scattered into
// views, overlapping views as if through a temporary, for every element size.
TEST(CudaTensor, ViewsOnTheDeviceCopyLikeViewsOnTheCpu) {
  REQUIRE_GPU();
  std::vector<float> values(24 * 10);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor host = Tensor::fromVector(values, {24, 10});
  const Tensor device = host.to(Device::cuda());
  for (const auto& [name, view] : std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>>{
           {"transpose", [](const Tensor& t) { return t.transpose(0, 1); }},
           {"strided slice", [](const Tensor& t) { return t.slice(0, 1, 23, 3); }},
           {"permuted 3-d", [](const Tensor& t) {
              return t.view({4, 6, 10}).permute({2, 0, 1}).narrow(1, 1, 2);
            }}}) {
    EXPECT_EQ(view(device).contiguous().toFloatVector(), view(host).contiguous().toFloatVector()) << name;
    EXPECT_EQ(view(device).to(Device::cpu()).toFloatVector(), view(host).toFloatVector()) << name;
    // Scatter: written through the view, from the host and from the device.
    Tensor hostTarget = Tensor::zeros({24, 10}), deviceTarget = Tensor::zeros({24, 10}, DType::Float32, Device::cuda());
    Tensor source = view(host).contiguous();
    view(hostTarget).copyFrom(source);
    Tensor deviceView = view(deviceTarget);
    deviceView.copyFrom(source);
    EXPECT_EQ(deviceTarget.toFloatVector(), hostTarget.toFloatVector()) << name;
    deviceView.copyFrom(source.to(Device::cuda()));
    EXPECT_EQ(deviceTarget.toFloatVector(), hostTarget.toFloatVector()) << name;
  }
  // Overlapping views of one storage, contiguous (rows shifted by one) and strided (columns),
  // as through a temporary.
  for (const auto& [to, from] : std::vector<std::pair<Tensor (*)(const Tensor&), Tensor (*)(const Tensor&)>>{
           {[](const Tensor& t) { return t.narrow(0, 1, 23); }, [](const Tensor& t) { return t.narrow(0, 0, 23); }},
           {[](const Tensor& t) { return t.narrow(1, 1, 9); }, [](const Tensor& t) { return t.narrow(1, 0, 9); }}}) {
    Tensor hostShift = host.clone(), deviceShift = device.clone();
    Tensor hostTo = to(hostShift), deviceTo = to(deviceShift);
    hostTo.copyFrom(from(hostShift));
    deviceTo.copyFrom(from(deviceShift));
    EXPECT_EQ(deviceShift.toFloatVector(), hostShift.toFloatVector());
  }
  // 8-, 1- and 2-byte elements.
  const Tensor labels = Tensor::fromVector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor t = labels.to(Device::cuda()).transpose(0, 1).contiguous().to(Device::cpu());
  EXPECT_EQ(std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + 6), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  for (DType small : {DType::UInt8, DType::Float16}) {
    const Tensor h = host.narrow(0, 0, 4).to(small);
    const Tensor back = h.to(Device::cuda()).transpose(0, 1).contiguous().to(Device::cpu());
    EXPECT_EQ(back.to(DType::Float32).toFloatVector(), h.transpose(0, 1).to(DType::Float32).toFloatVector())
        << dtypeName(small);
  }
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
