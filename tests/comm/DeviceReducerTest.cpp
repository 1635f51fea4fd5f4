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
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace aps::comm {
namespace {

constexpr int kWorld = 3;
const std::vector<int64_t> kCounts = {1000, 600, 333};
const std::vector<std::string> kNames = {"conv.weight", "fc.weight", "fc.bias"};

// Rank r's gradient of parameter p at a step: magnitudes per parameter far apart, so APS shifts
// each layer differently.
std::vector<float> gradientOf(int rank, size_t p, int step = 0) {
  Rng rng(100 + static_cast<uint64_t>(rank) * 7 + p + static_cast<uint64_t>(step) * 1000);
  const float scale = p == 0 ? 1e-3f : (p == 1 ? 30.0f : 0.2f);
  std::vector<float> g(static_cast<size_t>(kCounts[p]));
  for (float& v : g) v = rng.normal() * scale * static_cast<float>(rank + 1) * static_cast<float>(step + 1);
  return g;
}

// The hooks around the reduction: a scaling mode and error feedback, in a wire format.
struct Variant {
  std::string name;
  std::string spec;
  precision::ScalingMode mode = precision::ScalingMode::Aps;
  bool errorFeedback = false;
  bool statistics = true;
  int64_t probeInterval = 0;  // > 0: the fidelity probe on every step with step % interval == 0
  size_t bucketCapBytes = 1;  // 1: a bucket per parameter
};
const Variant kApsStatistics{"aps_statistics", "e4m3"};

// One reducer of a simulated world of kWorld ranks over two_shot with the variant's hooks and
// buckets, on `device`.
struct Reduction {
  explicit Reduction(Device device, const Variant& variant = kApsStatistics)
      : gradients(kWorld, device),
        agreements(kWorld),
        scaling(formatsOf(variant), kCounts.size(), 10, kWorld, variant.probeInterval) {
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
    options.bucketCapBytes = options.firstBucketCapBytes = variant.bucketCapBytes;
    options.average = true;
    options.seed = 5;
    options.hook = &scaling;
    if (device.isCuda()) options.agreements = &agreements;
    reducer = std::make_unique<GradientReducer>(
        device.isCuda() ? static_cast<Transport&>(gradients) : static_cast<Transport&>(agreements), grads,
        std::vector<std::shared_ptr<const AllReduceAlgorithm>>{
            makeAllReduce(all, precision::makeCodec(precision::CodecSpec::parse(variant.spec)))},
        std::vector<int>{}, options);
  }
  static std::vector<BucketScaling::FormatScaling> formatsOf(const Variant& variant) {
    auto f = BucketScaling::FormatScaling::forSpec(precision::CodecSpec::parse(variant.spec), variant.mode, kWorld,
                                                   variant.errorFeedback);
    f.statistics = variant.statistics;
    return {f};
  }
  void markBucket(int bucket) {
    for (int p : reducer->layout().buckets()[static_cast<size_t>(bucket)].params)
      for (int r = 0; r < kWorld; ++r) reducer->markReady(p, r);
  }
  // One step; `fresh`: of the gradients of step `steps` (gradientOf), else of what is in the
  // buffers (the last step's results).
  void step(bool fresh = false) {
    if (fresh) {
      std::vector<uint32_t> bits;
      for (int r = 0; r < kWorld; ++r)
        for (size_t p = 0; p < kCounts.size(); ++p)
          for (float v : gradientOf(r, p, steps)) bits.push_back(std::bit_cast<uint32_t>(v));
      setGradients(bits);
    }
    ++steps;
    for (int b = 0; b < static_cast<int>(reducer->layout().buckets().size()); ++b) markBucket(b);
    reducer->wait();
    scaling.finishStep(agreements);
    probe = scaling.takeProbe();
  }
  // Every rank's reduced gradients, parameter after parameter.
  std::vector<uint32_t> resultBits() const {
    std::vector<uint32_t> bits;
    for (const Tensor& t : tensors)
      for (float v : t.toFloatVector()) bits.push_back(std::bit_cast<uint32_t>(v));
    return bits;
  }
  // Sets every rank's gradients to `bits` (as resultBits gives them).
  void setGradients(const std::vector<uint32_t>& bits) {
    size_t at = 0;
    for (Tensor& t : tensors) {
      const auto n = static_cast<size_t>(t.numel());
      ASSERT_LE(at + n, bits.size());
      if (t.device().isCuda()) {
        cuda::copySync(t.data<float>(), bits.data() + at, n * sizeof(float), cuda::CopyKind::HostToDevice);
      } else {
        std::memcpy(t.data<float>(), bits.data() + at, n * sizeof(float));
      }
      at += n;
    }
  }
  // What the hooks keep: each parameter's statistics windows and every rank's residuals, as bits.
  std::vector<uint64_t> hookStateBits() const {
    std::vector<uint64_t> bits;
    for (int p = 0; p < static_cast<int>(kCounts.size()); ++p) {
      for (const auto& c : {scaling.statistics(p), scaling.outputStatistics(p)}) {
        for (int64_t v : {c.total, c.nonzero, c.flushed, c.saturated}) bits.push_back(static_cast<uint64_t>(v));
        bits.push_back(std::bit_cast<uint64_t>(c.errorSquared));
        bits.push_back(std::bit_cast<uint64_t>(c.inputSquared));
      }
      bits.push_back(static_cast<uint64_t>(scaling.lastShift(p)));
      if (probe) {  // the probe's figures of the last step
        const ProbeLayer& layer = probe->layers[static_cast<size_t>(p)];
        bits.push_back(layer.probed);
        bits.push_back(std::bit_cast<uint64_t>(layer.relError));
        bits.push_back(std::bit_cast<uint64_t>(layer.cosine));
        for (const auto& c : {layer.in, layer.out})
          for (int64_t v : {c.total, c.nonzero, c.flushed, c.saturated}) bits.push_back(static_cast<uint64_t>(v));
      }
      for (int r = 0; r < kWorld; ++r) {
        const std::vector<float> residual = scaling.residual(r, p);
        bits.push_back(residual.size());
        for (float v : residual) bits.push_back(std::bit_cast<uint32_t>(v));
      }
    }
    return bits;
  }

  SimTransport gradients;   // of device memory where device is a GPU
  SimTransport agreements;  // host memory: the hooks' agreements
  BucketScaling scaling;
  std::optional<ProbeRecord> probe;  // the last step's, where it was probed
  int steps = 0;
  std::vector<Tensor> tensors;  // [rank * params + p]
  std::unique_ptr<GradientReducer> reducer;
};

// The host reducer's results of `steps` steps, each reducing the last one's results.
std::vector<std::vector<uint32_t>> hostResults(int steps, const Variant& variant = kApsStatistics) {
  Reduction host(Device::cpu(), variant);
  std::vector<std::vector<uint32_t>> results;
  for (int step = 0; step < steps; ++step) {
    host.step();
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
    gpu.step();
    EXPECT_EQ(gpu.resultBits(), expected[step]) << "step " << step;
  }
}

// Every hook on the device (error feedback's residuals kept there, FP8-LM's amax, scaling and
// saturation counts, the statistics) gives the host's bits: the reduced gradients, and what
// the hooks keep (statistics windows, residuals, shifts), step after step.
const std::vector<Variant> kHookVariants = {
    {"aps_feedback", "e4m3", precision::ScalingMode::Aps, true},
    {"fp8lm_feedback", "e4m3", precision::ScalingMode::Fp8Lm, true},
    {"global_feedback_stochastic", "e3m2:stochastic", precision::ScalingMode::Global, true},
    {"fp8lm_stochastic", "e5m2:stochastic", precision::ScalingMode::Fp8Lm, false},
    {"aps_feedback_probe", "e4m3", precision::ScalingMode::Aps, true, true, 1},
    {"fp8lm_feedback_probe_one_bucket", "e4m3", precision::ScalingMode::Fp8Lm, true, true, 1, size_t{1} << 20},
};

TEST(DeviceReducer, HooksOnTheDeviceKeepTheHostsBits) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (const Variant& variant : kHookVariants) {
    Reduction host(Device::cpu(), variant);
    Reduction gpu(Device::cuda(cuda::currentDevice()), variant);
    for (int step = 0; step < 3; ++step) {
      host.step(true);
      gpu.step(true);
      EXPECT_EQ(gpu.resultBits(), host.resultBits()) << variant.name << " step " << step;
      EXPECT_EQ(gpu.hookStateBits(), host.hookStateBits()) << variant.name << " step " << step;
    }
    // What was compared is there: the inputs' and the sums' statistics, residuals, the probe.
    EXPECT_EQ(gpu.probe.has_value(), variant.probeInterval > 0) << variant.name;
    for (int p = 0; p < static_cast<int>(kCounts.size()); ++p) {
      if (gpu.probe) {
        const ProbeLayer& layer = gpu.probe->layers[static_cast<size_t>(p)];
        EXPECT_TRUE(layer.probed) << variant.name;
        EXPECT_EQ(layer.in.total, kWorld * kCounts[static_cast<size_t>(p)]) << variant.name;
      }
      EXPECT_EQ(gpu.scaling.statistics(p).total, 3 * kCounts[static_cast<size_t>(p)]) << variant.name;
      EXPECT_GT(gpu.scaling.outputStatistics(p).total, 0) << variant.name;
      EXPECT_EQ(gpu.scaling.residual(kWorld - 1, p).size(),
                variant.errorFeedback ? static_cast<size_t>(kCounts[static_cast<size_t>(p)]) : 0u)
          << variant.name;
    }
  }
}

// Residuals saved from the device load anywhere: a GPU run resumed from a host run's state (and
// a host run from a GPU run's) goes on with the uninterrupted run's bits.
TEST(DeviceReducer, ErrorFeedbackResidualsResumeAcrossHostAndDevice) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Variant& variant = kHookVariants[0];
  const Device gpuDevice = Device::cuda(cuda::currentDevice());
  Reduction whole(Device::cpu(), variant);
  for (int step = 0; step < 3; ++step) whole.step(true);
  for (const bool savedOnDevice : {false, true}) {
    Reduction first(savedOnDevice ? gpuDevice : Device::cpu(), variant);
    first.step(true);
    first.step(true);
    const NamedTensors state = first.scaling.stateDict();
    ASSERT_NE(findTensor(state, "residual.2"), nullptr);
    Reduction resumed(savedOnDevice ? Device::cpu() : gpuDevice, variant);
    resumed.scaling.loadStateDict(state);
    resumed.steps = first.steps;
    resumed.step(true);
    EXPECT_EQ(resumed.resultBits(), whole.resultBits()) << "saved on the device: " << savedOnDevice;
    EXPECT_EQ(resumed.hookStateBits(), whole.hookStateBits()) << "saved on the device: " << savedOnDevice;
  }
}

#if defined(APS_CUDA_EMULATION)
// Error feedback, FP8-LM, the statistics (of the inputs and of the re-encoded sums) and the
// fidelity probe work on the buckets where they are: a step copies between host and device only
// agreements, counts and figures, less than one rank's gradients (a hook on host copies would
// move every rank's buckets both ways).
TEST(DeviceReducer, HooksOnTheDeviceCopyNoBucketToTheHost) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  Variant variant = kHookVariants[1];  // FP8-LM, error feedback, statistics
  variant.probeInterval = 1;
  Reduction gpu(Device::cuda(cuda::currentDevice()), variant);
  gpu.step();  // the first step makes the residuals
  const uint64_t before = cuda::emu::hostDeviceBytesCopied();
  gpu.step();
  const uint64_t copied = cuda::emu::hostDeviceBytesCopied() - before;
  EXPECT_GT(copied, 0u);  // the agreements' maxima and counts
  int64_t oneRank = 0;    // one rank's gradients
  for (int64_t n : kCounts) oneRank += n;
  EXPECT_LT(copied, static_cast<uint64_t>(oneRank) * sizeof(float)) << copied << " bytes in a step";
}
#endif

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
