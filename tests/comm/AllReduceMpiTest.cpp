// Real ranks against simulated ones: every rank reduces its own buffer with the mpi backend,
// also runs the whole N-rank world in the simulator from the same seeded inputs, and the two
// must agree bit for bit (docs/ARCHITECTURE.md, "Simulated ranks that match real ones").
#include "comm/AllReduceAlgorithm.h"
#include "comm/MpiCommunicator.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "tests/comm/SeededInputs.h"
#include "tests/comm/TestCodecs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace aps::comm {
namespace {

using testing::inputOf;

uint64_t fingerprint(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct Case {
  AllReduceOptions options;
  bool stochastic;
};

std::vector<Case> cases() {
  return {
      {{.kind = AllReduceKind::TwoShot}, false},
      {{.kind = AllReduceKind::Ring}, false},
      {{.kind = AllReduceKind::AllGather, .roundEveryAdd = true}, false},
      {{.kind = AllReduceKind::AllGather, .roundEveryAdd = false}, false},
      {{.kind = AllReduceKind::AllGather, .roundEveryAdd = true, .kahan = true}, true},
      {{.kind = AllReduceKind::Native}, false},
      {{.kind = AllReduceKind::TwoShot}, true},
      {{.kind = AllReduceKind::Ring}, true},
  };
}

TEST(AllReduceMpi, SimulatedWorldMatchesRealRanksBitForBit) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  SimTransport sim(n);
  for (const Case& c : cases()) {
    auto codec = std::make_shared<testing::Half16Codec>(c.stochastic);
    auto algorithm = makeAllReduce(c.options, codec);
    for (int64_t count : {0, 1, 2, 3, 5, 7, 1000, 4097}) {
      const precision::EncodeContext ctx{.seed = 11, .stream = static_cast<uint64_t>(count), .offset = 0};
      std::vector<float> real = inputOf(me, count, 3);
      const SyncStats realStats = algorithm->run(comm, std::vector<float*>{real.data()}, count, ctx);

      std::vector<std::vector<float>> world;
      std::vector<float*> pointers;
      for (int r = 0; r < n; ++r) world.push_back(inputOf(r, count, 3));
      for (auto& w : world) pointers.push_back(w.data());
      const SyncStats simStats = algorithm->run(sim, pointers, count, ctx);

      const std::string what = algorithm->name() + " n=" + std::to_string(count);
      EXPECT_EQ(0, real.empty()
                       ? 0
                       : std::memcmp(real.data(), world[static_cast<size_t>(me)].data(), real.size() * sizeof(float)))
          << what << ": rank " << me << " differs from its simulation";
      EXPECT_EQ(realStats.bytesSent.at(0), simStats.bytesSent.at(static_cast<size_t>(me))) << what;
      EXPECT_FALSE(realStats.nonFinite) << what;

      // Identical bits on every real rank.
      const uint64_t mine = fingerprint(real);
      std::vector<uint64_t> all(static_cast<size_t>(n));
      comm.allGather(&mine, sizeof mine, all.data());
      for (int r = 0; r < n; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], mine) << what << ": rank " << r;
    }
  }
}

TEST(AllReduceMpi, PrecisionCodecsMatchTheSimulationBitForBit) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  SimTransport sim(n);
  for (const char* spec : {"e4m3:stochastic", "e3m0", "e5m2", "dettmers_dynamic/block256"}) {
    std::shared_ptr<const precision::Codec> codec = precision::makeCodec(spec);
    for (AllReduceKind kind : {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather}) {
      auto algorithm = makeAllReduce({.kind = kind}, codec);
      for (int64_t count : {3, 777}) {
        const precision::EncodeContext ctx{.seed = 5, .stream = 6, .offset = 0};
        std::vector<float> real = inputOf(me, count, 8);
        algorithm->run(comm, std::vector<float*>{real.data()}, count, ctx);
        std::vector<std::vector<float>> world;
        std::vector<float*> pointers;
        for (int r = 0; r < n; ++r) world.push_back(inputOf(r, count, 8));
        for (auto& w : world) pointers.push_back(w.data());
        algorithm->run(sim, pointers, count, ctx);
        EXPECT_EQ(0, real.empty()
                         ? 0
                         : std::memcmp(real.data(), world[static_cast<size_t>(me)].data(), real.size() * sizeof(float)))
            << algorithm->name() << " n=" << count << " rank " << me;
      }
    }
  }
}

// two_shot's pipeline on real ranks (several rounds in flight, MPI_Testall between segments)
// against the simulated world without pipelining: the same bits and bytes.
TEST(AllReduceMpi, PipelinedTwoShotMatchesTheUnpipelinedSimulation) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  SimTransport sim(n);
  for (const char* spec : {"fp32", "e4m3:stochastic", "e2m1", "bf16", "mxfp4", "dettmers_dynamic/block256"}) {
    const bool native = std::string(spec) == "fp32";
    std::shared_ptr<const precision::Codec> codec = native ? nullptr : precision::makeCodec(spec);
    const AllReduceKind kind = native ? AllReduceKind::Native : AllReduceKind::TwoShot;
    const auto unpipelined = makeAllReduce({.kind = kind, .segmentBytes = 0}, codec);
    for (int64_t segmentBytes : {100, 1000, 4096}) {
      const auto pipelined = makeAllReduce({.kind = kind, .segmentBytes = segmentBytes}, codec);
      for (int64_t count : {0, 1, 3, 777, 20011}) {
        const precision::EncodeContext ctx{.seed = 21, .stream = static_cast<uint64_t>(count), .offset = 0};
        std::vector<float> real = inputOf(me, count, 4);
        const SyncStats realStats = pipelined->run(comm, std::vector<float*>{real.data()}, count, ctx);
        std::vector<std::vector<float>> world;
        std::vector<float*> pointers;
        for (int r = 0; r < n; ++r) world.push_back(inputOf(r, count, 4));
        for (auto& w : world) pointers.push_back(w.data());
        const SyncStats simStats = unpipelined->run(sim, pointers, count, ctx);
        const std::string what =
            pipelined->name() + " n=" + std::to_string(count) + " segment=" + std::to_string(segmentBytes);
        EXPECT_EQ(0, real.empty()
                         ? 0
                         : std::memcmp(real.data(), world[static_cast<size_t>(me)].data(), real.size() * sizeof(float)))
            << what << " rank " << me;
        EXPECT_EQ(realStats.bytesSent.at(0), simStats.bytesSent.at(static_cast<size_t>(me))) << what;
      }
    }
  }
}

TEST(AllReduceMpi, NonFiniteOnOneRankIsFlaggedOnAll) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  auto codec = std::make_shared<testing::Half16Codec>();
  for (const Case& c : cases()) {
    auto algorithm = makeAllReduce(c.options, codec);
    std::vector<float> data = inputOf(me, 64, 5);
    if (me == n - 1) data[10] = std::numeric_limits<float>::infinity();
    const SyncStats stats = algorithm->run(comm, std::vector<float*>{data.data()}, 64);
    EXPECT_TRUE(stats.nonFinite) << algorithm->name() << " on rank " << me;
  }
}

TEST(AllReduceMpi, TwoShotIsCloseToTheExactSum) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  const int64_t count = 513;
  std::vector<float> data = inputOf(me, count, 9);
  makeAllReduce({.kind = AllReduceKind::TwoShot}, std::make_shared<testing::Half16Codec>())
      ->run(comm, std::vector<float*>{data.data()}, count);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(inputOf(r, count, 9));
  for (int64_t i = 0; i < count; ++i) {
    double exact = 0.0, absSum = 0.0;
    for (const auto& in : inputs) {
      const double x = in[static_cast<size_t>(i)];
      exact += x;
      absSum += std::fabs(x);
    }
    EXPECT_LE(std::fabs(data[static_cast<size_t>(i)] - exact), 2 * testing::Half16Codec::kUnitRoundoff * absSum);
  }
}

}  // namespace
}  // namespace aps::comm
