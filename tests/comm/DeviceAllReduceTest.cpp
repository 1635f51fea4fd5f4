// The all-reduce schedules over device buffers (AllReduceOptions::device) between real ranks on
// NCCL, one GPU each, against the simulator's world of as many ranks on the host from the same
// seeded inputs: bit for bit, with the same bytes sent and the same non-finite answer, for every
// algorithm and a float, a block-scaled, a Dettmers and the fp32 wire (label cuda; skipped
// without a GPU; in the emulated device's build, under mpirun with 2 and 4 ranks).
#include "comm/AllReduceAlgorithm.h"
#include "comm/NcclCommunicator.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/CodecSpec.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace aps::comm {
namespace {

std::vector<float> inputOf(int rank, int64_t n, uint64_t seed) {
  Rng rng(seed * 7919 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal(0.0f, 1.0f + static_cast<float>(rank));
  return v;
}

struct Case {
  std::string codec;
  AllReduceOptions options;
  int64_t n = 0;
  bool withShifts = false;  // APS's per-layer scalings, as InputFacts
  bool withInf = false;     // one rank's input holds an infinity
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
    std::shared_ptr<const precision::Codec> codec;
    if (!c.codec.empty()) codec = precision::makeCodec(c.codec);
    const precision::EncodeContext ctx{.seed = 9, .stream = seed, .offset = 0};
    InputFacts facts;
    if (c.withShifts) facts.shifts = shiftsFor(c.n);
    const InputFacts* inputs = c.withShifts ? &facts : nullptr;
    // The simulated world on the host.
    std::vector<std::vector<float>> all;
    for (int r = 0; r < world; ++r) {
      all.push_back(inputOf(r, c.n, seed));
      if (c.withInf && r == world - 1)
        all.back()[static_cast<size_t>(c.n / 2)] = std::numeric_limits<float>::infinity();
    }
    std::vector<float*> ptrs;
    for (auto& v : all) ptrs.push_back(v.data());
    const SyncStats simStats = makeAllReduce(c.options, codec)->run(sim, ptrs, c.n, ctx, nullptr, false, false, inputs);
    // This rank on its GPU.
    Tensor mine = Tensor::fromVector(inputOf(me, c.n, seed), {c.n});
    if (c.withInf && me == world - 1 && c.n > 0) {
      std::vector<float> v = mine.toFloatVector();
      v[static_cast<size_t>(c.n / 2)] = std::numeric_limits<float>::infinity();
      mine = Tensor::fromVector(v, {c.n});
    }
    mine = mine.to(device);
    AllReduceOptions options = c.options;
    options.device = device;
    auto algorithm = makeAllReduce(options, codec);
    float* data = mine.data<float>();
    const SyncStats stats =
        algorithm->run(nccl, std::span<float* const>(&data, 1), c.n, ctx, nullptr, false, false, inputs);
    const std::vector<float> got = mine.toFloatVector();
    ASSERT_EQ(got.size(), all[0].size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i)
      differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(all[static_cast<size_t>(me)][i]) ? 1 : 0;
    EXPECT_EQ(differ, 0u) << "values that differ from the simulator's";
    EXPECT_EQ(stats.nonFinite, simStats.nonFinite);
    EXPECT_EQ(stats.nonFinite, c.withInf);
    ASSERT_EQ(stats.bytesSent.size(), 1u);
    EXPECT_EQ(stats.bytesSent[0], simStats.bytesSent[static_cast<size_t>(me)]);
    ++seed;
  }
}

TEST(DeviceAllReduce, RefusesWhatItDoesNotRunOnTheDevice) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device device = Device::cuda(cuda::currentDevice());
  EXPECT_ERROR_NAMES(
      makeAllReduce({.kind = AllReduceKind::AllGather, .kahan = true, .device = device}, precision::makeCodec("e4m3")),
      "Kahan summation runs on the host only");
  // Simulated ranks share the host's memory: their schedules stay on the host.
  SimTransport sim(2);
  auto algorithm = makeAllReduce({.device = device}, precision::makeCodec("e4m3"));
  Tensor a = Tensor::zeros({8}, DType::Float32, device), b = Tensor::zeros({8}, DType::Float32, device);
  std::vector<float*> ptrs{a.data<float>(), b.data<float>()};
  EXPECT_ERROR_NAMES(algorithm->run(sim, ptrs, 8), "over device buffers a process hosts one rank");
}

}  // namespace
}  // namespace aps::comm
