// The all-reduce schedules over device buffers (AllReduceOptions::device) between real ranks on
// NCCL, one GPU each, against the simulator's world of as many ranks on the host from the same
// seeded inputs: bit for bit, with the same bytes sent and the same non-finite answer, for every
// algorithm and a float, a block-scaled, a Dettmers and the fp32 wire, and what an observer of
// the encodes sees (label cuda; skipped without a GPU; in the emulated device's build, under
// mpirun with 2 and 4 ranks).
#include "comm/AllReduceAlgorithm.h"
#include "comm/NcclCommunicator.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/CodecSpec.h"
#include "tests/comm/SeededInputs.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace aps::comm {
namespace {

using testing::inputOf;

struct Case {
  std::string codec;
  AllReduceOptions options;
  int64_t n = 0;
  bool withShifts = false;  // APS's per-layer scalings, as InputFacts
  bool withInf = false;     // one rank's input holds an infinity
  bool observed = false;    // an EncodeObserver sees the encodes
};

// What an observer saw: per site, the sum over its calls of a hash of (begin, n, the values'
// and the decoded values' bits). Sums add up over ranks whatever order the calls came in.
class HashingObserver final : public EncodeObserver {
 public:
  void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) override {
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(begin) * 31 ^ static_cast<uint64_t>(n);
    for (int64_t i = 0; i < n; ++i) {
      h = (h ^ std::bit_cast<uint32_t>(values[i])) * 1099511628211ull;
      h = (h ^ std::bit_cast<uint32_t>(decoded[i])) * 1099511628211ull;
    }
    sums[site == Site::Input ? 0 : 1] += h;
  }
  uint64_t sums[2] = {0, 0};
};

std::vector<Case> cases() {
  using K = AllReduceKind;
  return {
      {"e4m3", {.kind = K::TwoShot}, 1001},
      // Segments of 256 wire bytes: the pipelined schedule, several segments per chunk.
      {"e4m3:stochastic", {.kind = K::TwoShot, .segmentBytes = 256}, 5000},
      {"e3m0/block32", {.kind = K::TwoShot, .segmentBytes = 256}, 4099, true},
      {"e4m3", {.kind = K::TwoShot}, 3000, true},
      {"dettmers_dynamic/block256", {.kind = K::TwoShot}, 2000},
      {"e5m2", {.kind = K::Ring}, 1001},
      {"e5m2", {.kind = K::Ring}, 1001, false, false, true},
      {"e4m3", {.kind = K::TwoShot, .segmentBytes = 256}, 3000, true, false, true},
      {"mxfp4", {.kind = K::Ring}, 2048, true},
      {"e4m3", {.kind = K::AllGather, .roundEveryAdd = true}, 777},
      {"e3m0:stochastic/block32", {.kind = K::AllGather, .roundEveryAdd = false}, 777},
      {"", {.kind = K::Native, .segmentBytes = 1024}, 3001},
      {"e4m3", {.kind = K::TwoShot}, 501, false, true},
      {"", {.kind = K::Native}, 501, false, true},
      {"e4m3", {.kind = K::TwoShot}, 0},
      {"e4m3", {.kind = K::TwoShot}, 3},
  };
}

// Per-layer scalings over n values, as ApsHook leaves them (ascending, not overlapping).
std::vector<InputShift> shiftsFor(int64_t n) { return {{0, n / 3, 2}, {n / 3, n / 4, -5}, {n / 2 + 7, n / 2 - 7, 1}}; }

std::shared_ptr<const precision::Codec> codecOf(const Case& c) {
  return c.codec.empty() ? nullptr : std::shared_ptr<const precision::Codec>(precision::makeCodec(c.codec));
}

InputFacts factsOf(const Case& c) {
  InputFacts facts;
  if (c.withShifts) facts.shifts = shiftsFor(c.n);
  return facts;
}

// Rank r's input to case c: an infinity in the middle of rank infRank's where the case has one.
std::vector<float> rankInput(const Case& c, int rank, int infRank, uint64_t seed) {
  std::vector<float> v = inputOf(rank, c.n, seed);
  if (c.withInf && rank == infRank && c.n > 0) v[static_cast<size_t>(c.n / 2)] = std::numeric_limits<float>::infinity();
  return v;
}

std::string describe(const Case& c) {
  return (c.codec.empty() ? std::string("fp32") : c.codec) + " " + std::string(allReduceKindName(c.options.kind)) +
         " n=" + std::to_string(c.n) + (c.withShifts ? " shifted" : "") + (c.withInf ? " inf" : "");
}

TEST(DeviceAllReduce, NcclRanksMatchTheSimulatedWorldBitForBit) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  MpiCommunicator mpi;
  if (mpi.ranksOnNode() > cuda::deviceCount()) GTEST_SKIP() << "one rank per GPU";
  NcclCommunicator nccl(mpi);
  const int world = nccl.size(), me = nccl.rank();
  if (const char* expect = std::getenv("APS_NCCL_TEST_EXPECT_RANKS")) {
    ASSERT_EQ(world, std::atoi(expect));
  }
  const Device device = Device::cuda(nccl.device());
  SimTransport sim(world);
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const auto codec = codecOf(c);
    const precision::EncodeContext ctx{.seed = 9, .stream = seed, .offset = 0};
    const InputFacts facts = factsOf(c);
    const InputFacts* inputs = c.withShifts ? &facts : nullptr;
    // The simulated world on the host.
    std::vector<std::vector<float>> all;
    for (int r = 0; r < world; ++r) all.push_back(rankInput(c, r, world - 1, seed));
    std::vector<float*> ptrs;
    for (auto& v : all) ptrs.push_back(v.data());
    HashingObserver simSaw, saw;
    const SyncStats simStats =
        makeAllReduce(c.options, codec)->run(sim, ptrs, c.n, ctx, c.observed ? &simSaw : nullptr, false, false, inputs);
    // This rank on its GPU: from the default stream (every NCCL call waited for), and from a
    // stream of the calling thread's own, as the reducer's communication thread runs it (NCCL's
    // calls queued on it in stream order, nothing waited for until the result is read).
    for (const bool ownStream : {false, true}) {
      SCOPED_TRACE(ownStream ? "on the thread's own stream" : "on the default stream");
      Tensor mine = Tensor::fromVector(rankInput(c, me, world - 1, seed), {c.n}).to(device);
      std::optional<cuda::Stream> side;
      std::optional<cuda::StreamGuard> onSide;
      if (ownStream) {
        side.emplace(device.index);
        cuda::Event made;  // the input's upload, on the default stream
        made.record(nullptr);
        made.wait(side->handle());
        onSide.emplace(side->handle());
      }
      AllReduceOptions options = c.options;
      options.device = device;
      auto algorithm = makeAllReduce(options, codec);
      float* data = mine.data<float>();
      saw = HashingObserver();
      const SyncStats stats = algorithm->run(nccl, std::span<float* const>(&data, 1), c.n, ctx,
                                             c.observed ? &saw : nullptr, false, false, inputs);
      const std::vector<float> got = mine.toFloatVector();  // copySync: on the current stream
      ASSERT_EQ(got.size(), all[0].size());
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i)
        differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(all[static_cast<size_t>(me)][i]) ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "values that differ from the simulator's";
      EXPECT_EQ(stats.nonFinite, simStats.nonFinite);
      EXPECT_EQ(stats.nonFinite, c.withInf);
      ASSERT_EQ(stats.bytesSent.size(), 1u);
      EXPECT_EQ(stats.bytesSent[0], simStats.bytesSent[static_cast<size_t>(me)]);
      if (c.observed) {  // every rank's observations, summed, are the simulated world's
        std::vector<uint64_t> everyRank(2 * static_cast<size_t>(world));
        mpi.allGather(saw.sums, sizeof saw.sums, everyRank.data());
        uint64_t input = 0, sum = 0;
        for (int r = 0; r < world; ++r) {
          input += everyRank[2 * static_cast<size_t>(r)];
          sum += everyRank[2 * static_cast<size_t>(r) + 1];
        }
        EXPECT_NE(simSaw.sums[0], 0u);
        EXPECT_EQ(input, simSaw.sums[0]);
        EXPECT_EQ(sum, simSaw.sums[1]);
      }
    }
    ++seed;
  }
}

// comm.backend: sim on a GPU: a world of 5 simulated ranks whose buffers are device memory
// (SimTransport with the device: each round device-to-device copies) gives every rank the host
// world's bits, bytes sent and observations.
TEST(DeviceAllReduce, ASimulatedWorldOnTheDeviceMatchesTheHost) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device device = Device::cuda(cuda::currentDevice());
  constexpr int kWorld = 5;
  SimTransport host(kWorld), onDevice(kWorld, device);
  uint64_t seed = 100;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const auto codec = codecOf(c);
    const precision::EncodeContext ctx{.seed = 3, .stream = seed, .offset = 0};
    const InputFacts facts = factsOf(c);
    const InputFacts* inputs = c.withShifts ? &facts : nullptr;
    std::vector<std::vector<float>> all;
    std::vector<Tensor> tensors;
    std::vector<float*> hostPtrs, devicePtrs;
    for (int r = 0; r < kWorld; ++r) {
      all.push_back(rankInput(c, r, 2, seed));
      tensors.push_back(Tensor::fromVector(all.back(), {c.n}).to(device));
      devicePtrs.push_back(tensors.back().data<float>());
    }
    for (auto& v : all) hostPtrs.push_back(v.data());
    HashingObserver hostSaw, deviceSaw;
    const SyncStats expected =
        makeAllReduce(c.options, codec)
            ->run(host, hostPtrs, c.n, ctx, c.observed ? &hostSaw : nullptr, false, false, inputs);
    AllReduceOptions options = c.options;
    options.device = device;
    const SyncStats got =
        makeAllReduce(options, codec)
            ->run(onDevice, devicePtrs, c.n, ctx, c.observed ? &deviceSaw : nullptr, false, false, inputs);
    for (int r = 0; r < kWorld; ++r) {
      const std::vector<float> result = tensors[static_cast<size_t>(r)].toFloatVector();
      size_t differ = 0;
      for (size_t i = 0; i < result.size(); ++i)
        differ += std::bit_cast<uint32_t>(result[i]) != std::bit_cast<uint32_t>(all[static_cast<size_t>(r)][i]);
      EXPECT_EQ(differ, 0u) << "rank " << r;
    }
    EXPECT_EQ(got.bytesSent, expected.bytesSent);
    EXPECT_EQ(got.nonFinite, expected.nonFinite);
    EXPECT_EQ(got.nonFinite, c.withInf);
    EXPECT_EQ(deviceSaw.sums[0], hostSaw.sums[0]);
    EXPECT_EQ(deviceSaw.sums[1], hostSaw.sums[1]);
    ++seed;
  }
}

TEST(DeviceAllReduce, RefusesWhatItDoesNotRunOnTheDevice) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device device = Device::cuda(cuda::currentDevice());
  EXPECT_ERROR_NAMES(
      makeAllReduce({.kind = AllReduceKind::AllGather, .kahan = true, .device = device}, precision::makeCodec("e4m3")),
      "Kahan summation runs on the host only");
  // The simulator's inputs folded ahead or kept as keys live on the host.
  SimTransport sim(2, device);
  auto algorithm = makeAllReduce({.kind = AllReduceKind::Native, .device = device}, nullptr);
  Tensor a = Tensor::zeros({8}, DType::Float32, device), b = Tensor::zeros({8}, DType::Float32, device);
  std::vector<float*> ptrs{a.data<float>(), b.data<float>()};
  EXPECT_ERROR_NAMES(algorithm->run(sim, ptrs, 8, {}, nullptr, true, true),
                     "inputs summed ahead or kept as 16-bit keys");
}

}  // namespace
}  // namespace aps::comm
