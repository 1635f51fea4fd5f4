// The gradient reducer with its buckets on a GPU: each bucket is reduced on the reducer's
// communication stream as soon as backward has made it, beside the kernels backward queues
// after it, and the results are the host reducer's bits.

#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/CodecSpec.h"

#if defined(APS_CUDA_EMULATION)
#include "tests/common/EmuGate.h"
#endif

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace aps::comm {
namespace {

constexpr int kWorld = 3;
const std::vector<int64_t> kCounts = {1000, 600, 333};
const std::vector<std::string> kNames = {"conv.weight", "fc.weight", "fc.bias"};

// Rank r's gradient of parameter p: magnitudes per parameter far apart, so APS shifts each
// layer differently.
std::vector<float> gradientOf(int rank, size_t p) {
  Rng rng(100 + static_cast<uint64_t>(rank) * 7 + p);
  const float scale = p == 0 ? 1e-3f : (p == 1 ? 30.0f : 0.2f);
  std::vector<float> g(static_cast<size_t>(kCounts[p]));
  for (float& v : g) v = rng.normal() * scale * static_cast<float>(rank + 1);
  return g;
}

// One reducer of a simulated world of kWorld ranks over E4M3 two_shot with APS and the
// quantisation statistics, one bucket per parameter, on `device`.
struct Reduction {
  explicit Reduction(Device device)
      : gradients(kWorld, device),
        agreements(kWorld),
        scaling({BucketScaling::FormatScaling::forSpec(precision::CodecSpec::parse("e4m3"), precision::ScalingMode::Aps,
                                                       kWorld, false)},
                kCounts.size(), 10, kWorld) {
    std::vector<std::vector<NamedGradient>> grads(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      for (size_t p = 0; p < kCounts.size(); ++p) {
        tensors.push_back(Tensor::fromVector(gradientOf(r, p), {kCounts[p]}).to(device));
        grads[static_cast<size_t>(r)].push_back(
            {kNames[p], {tensors.back().data<float>(), kCounts[p], DType::Float32, device}});
      }
    }
    AllReduceOptions all{.kind = AllReduceKind::TwoShot};
    all.device = device;
    ReducerOptions options;
    options.bucketCapBytes = options.firstBucketCapBytes = 1;  // a bucket per parameter
    options.average = true;
    options.seed = 5;
    options.hook = &scaling;
    if (device.isCuda()) options.agreements = &agreements;
    reducer = std::make_unique<GradientReducer>(
        device.isCuda() ? static_cast<Transport&>(gradients) : static_cast<Transport&>(agreements), grads,
        std::vector<std::shared_ptr<const AllReduceAlgorithm>>{
            makeAllReduce(all, precision::makeCodec(precision::CodecSpec::parse("e4m3")))},
        std::vector<int>{}, options);
  }
  void markBucket(int bucket) {
    for (int p : reducer->layout().buckets()[static_cast<size_t>(bucket)].params)
      for (int r = 0; r < kWorld; ++r) reducer->markReady(p, r);
  }
  // Every rank's reduced gradients, parameter after parameter.
  std::vector<uint32_t> resultBits() const {
    std::vector<uint32_t> bits;
    for (const Tensor& t : tensors)
      for (float v : t.toFloatVector()) bits.push_back(std::bit_cast<uint32_t>(v));
    return bits;
  }

  SimTransport gradients;   // of device memory where device is a GPU
  SimTransport agreements;  // host memory: the hooks' agreements
  BucketScaling scaling;
  std::vector<Tensor> tensors;  // [rank * params + p]
  std::unique_ptr<GradientReducer> reducer;
};

// The host reducer's results of `steps` steps, each reducing the last one's results.
std::vector<std::vector<uint32_t>> hostResults(int steps) {
  Reduction host(Device::cpu());
  std::vector<std::vector<uint32_t>> results;
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < static_cast<int>(kCounts.size()); ++b) host.markBucket(b);
    host.reducer->wait();
    results.push_back(host.resultBits());
  }
  return results;
}

TEST(DeviceReducer, MatchesTheHostReducerBitForBitStepAfterStep) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::vector<uint32_t>> expected = hostResults(3);
  Reduction gpu(Device::cuda(cuda::currentDevice()));
  ASSERT_EQ(gpu.reducer->layout().buckets().size(), kCounts.size());
  for (size_t step = 0; step < expected.size(); ++step) {
    for (int b = 0; b < static_cast<int>(kCounts.size()); ++b) gpu.markBucket(b);
    gpu.reducer->wait();
    EXPECT_EQ(gpu.resultBits(), expected[step]) << "step " << step;
  }
}

#if defined(APS_CUDA_EMULATION)
// Backward's later kernels hold the default stream (a gate shut there after the first bucket's
// gradients were marked ready): the first bucket is still reduced, on the communication stream,
// with APS's maxima read back and the statistics' host copies made there. Reducing on the
// default stream would wait behind the gate forever.
TEST(DeviceReducer, ReducesABucketWhileBackwardHoldsTheComputeStream) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<uint32_t> expected = hostResults(1)[0];
  Reduction gpu(Device::cuda(cuda::currentDevice()));
  gpu.markBucket(0);
  testsupport::Gate backward;
  backward.shutOn(nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (gpu.reducer->bucketsReduced() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int reducedWhileHeld = gpu.reducer->bucketsReduced();
  backward.open();
  EXPECT_EQ(reducedWhileHeld, 1) << "the first bucket was not reduced while the default stream was held";
  for (int b = 1; b < static_cast<int>(kCounts.size()); ++b) gpu.markBucket(b);
  gpu.reducer->wait();
  EXPECT_EQ(gpu.resultBits(), expected);
}

// The exposed time of a step on the GPU is how long the reduction ran on after backward's
// kernels ended, reported by the next wait(): zero where backward (held by a gate past wait())
// ended last; more than zero where the last bucket's gradients came last (held until after
// wait() began), so its reduction ran after them.
TEST(DeviceReducer, ExposedTimeIsTheReductionsTailAfterBackward) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::vector<uint32_t>> expected = hostResults(3);
  Reduction gpu(Device::cuda(cuda::currentDevice()));
  const int last = static_cast<int>(kCounts.size()) - 1;
  // Step 0: every bucket reduced while backward's stream is held.
  for (int b = 0; b <= last; ++b) gpu.markBucket(b);
  testsupport::Gate backward;
  backward.shutOn(nullptr);
  EXPECT_EQ(gpu.reducer->wait().exposedSeconds, 0.0);  // no step before
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  backward.open();
  EXPECT_EQ(gpu.resultBits(), expected[0]);
  // Step 1: the last bucket's gradients are held, then released while wait() waits.
  for (int b = 0; b < last; ++b) gpu.markBucket(b);
  testsupport::Gate lastGradients;
  lastGradients.shutOn(nullptr);
  gpu.markBucket(last);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    lastGradients.open();
  });
  const double step0Exposed = gpu.reducer->wait().exposedSeconds;
  opener.join();
  EXPECT_EQ(step0Exposed, 0.0) << "step 0's reduction ended before its backward";
  EXPECT_EQ(gpu.resultBits(), expected[1]);
  for (int b = 0; b <= last; ++b) gpu.markBucket(b);
  const double step1Exposed = gpu.reducer->wait().exposedSeconds;
  EXPECT_GT(step1Exposed, 0.0) << "step 1's last bucket was reduced after its gradients";
  EXPECT_LT(step1Exposed, 60.0);
  EXPECT_EQ(gpu.resultBits(), expected[2]);
}
#endif

}  // namespace
}  // namespace aps::comm
