// The bucketed reducer on real ranks: a fake backward marks gradients ready from another
// thread while the communication thread owns every MPI call; the result must equal the
// simulated world's bit for bit.
#include "comm/GradientReducer.h"
#include "comm/MpiCommunicator.h"
#include "comm/SimTransport.h"
#include "comm/SmallAllReduce.h"
#include "framework/core/Rng.h"
#include "tests/comm/HierarchicalHarness.h"
#include "tests/comm/TestCodecs.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

namespace aps::comm {
namespace {

const std::vector<int64_t> kSizes{33, 0, 129, 7, 1000, 64};

std::vector<std::vector<float>> gradsOf(int rank, int step) {
  Rng rng(static_cast<uint64_t>(1000 * step + rank));
  std::vector<std::vector<float>> g;
  for (int64_t n : kSizes) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = rng.normal();
    g.push_back(std::move(v));
  }
  return g;
}

std::vector<NamedGradient> named(std::vector<std::vector<float>>& g) {
  std::vector<NamedGradient> out;
  for (size_t p = 0; p < g.size(); ++p)
    out.push_back({fmt::format("p{}", p), {g[p].data(), static_cast<int64_t>(g[p].size())}});
  return out;
}

TEST(GradientReducerMpi, OverlappedBucketsMatchTheSimulationBitForBit) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  auto codec = std::make_shared<testing::Half16Codec>(true);
  std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms{
      makeAllReduce({.kind = AllReduceKind::TwoShot}, codec), makeAllReduce({.kind = AllReduceKind::Ring}, codec),
      makeAllReduce({.kind = AllReduceKind::Native}, nullptr)};
  const std::vector<int> formats{0, 0, 1, 1, 0, 2};
  const ReducerOptions options{.bucketCapBytes = 2048, .firstBucketCapBytes = 256, .average = true, .seed = 4};

  // Persistent gradient storage, refilled every step as backward would.
  std::vector<std::vector<float>> real = gradsOf(me, 0);
  std::vector<std::vector<std::vector<float>>> world;
  for (int r = 0; r < n; ++r) world.push_back(gradsOf(r, 0));
  std::vector<std::vector<NamedGradient>> worldNamed;
  for (auto& g : world) worldNamed.push_back(named(g));

  GradientReducer onMpi(comm, {named(real)}, algorithms, formats, options);
  SimTransport sim(n);
  GradientReducer onSim(sim, worldNamed, algorithms, formats, options);
  for (int step = 0; step < 3; ++step) {
    // Refill in place: the reducer holds pointers to these buffers.
    const auto mine = gradsOf(me, step);
    for (size_t p = 0; p < mine.size(); ++p) std::copy(mine[p].begin(), mine[p].end(), real[p].begin());
    for (int r = 0; r < n; ++r) {
      auto g = gradsOf(r, step);
      for (size_t p = 0; p < g.size(); ++p)
        std::copy(g[p].begin(), g[p].end(), world[static_cast<size_t>(r)][p].begin());
    }
    std::thread backward([&] {
      for (int p = static_cast<int>(kSizes.size()) - 1; p >= 0; --p) onMpi.markReady(p);
    });
    backward.join();
    const StepCommStats stats = onMpi.wait();
    for (int p = static_cast<int>(kSizes.size()) - 1; p >= 0; --p)
      for (int r = 0; r < n; ++r) onSim.markReady(p, r);
    const StepCommStats simStats = onSim.wait();
    for (size_t p = 0; p < kSizes.size(); ++p) {
      EXPECT_EQ(0, real[p].empty()
                       ? 0
                       : std::memcmp(real[p].data(), world[static_cast<size_t>(me)][p].data(), real[p].size() * 4))
          << "step " << step << " parameter " << p << " rank " << me;
    }
    EXPECT_EQ(stats.bytesSent.at(0), simStats.bytesSent.at(static_cast<size_t>(me)));
    EXPECT_FALSE(stats.nonFinite);
    EXPECT_GE(stats.exposedSeconds, 0.0);
  }
}

// Hierarchical APS (comm.algorithm: hierarchical): groups, leaders and the broadcast are
// sub-worlds of the MPI communicator; every divisor G of the world size must give the bits of
// the simulation, with APS hooks at both levels and with stochastic rounding.
TEST(GradientReducerMpi, HierarchicalMatchesTheSimulationBitForBit) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  const std::vector<std::pair<std::string, precision::ScalingMode>> wires{
      {"e4m3", precision::ScalingMode::Aps},
      {"e3m0", precision::ScalingMode::Aps},
      {"e5m2:stochastic", precision::ScalingMode::Aps},
      {"fp32", precision::ScalingMode::None}};
  for (int group = 1; group <= n; ++group) {
    if (n % group != 0) continue;
    for (const auto& [wire, mode] : wires) {
      for (bool poisoned : {false, true}) {
        auto grads = [&](int r) {
          auto g = testing::hierarchicalGrads(r, 3);
          if (poisoned && r == n - 1) g[40] = std::numeric_limits<float>::infinity();
          return g;
        };
        const auto real = testing::reduceStep(comm, {grads(me)}, wire, mode, group);
        SimTransport sim(n);
        std::vector<std::vector<float>> all;
        for (int r = 0; r < n; ++r) all.push_back(grads(r));
        const auto simulated = testing::reduceStep(sim, all, wire, mode, group);
        const auto& mine = simulated.grads[static_cast<size_t>(me)];
        const std::string what = fmt::format("{} G={} N={} rank {}{}", wire, group, n, me, poisoned ? " inf" : "");
        ASSERT_EQ(real.grads[0].size(), mine.size()) << what;
        EXPECT_EQ(0, std::memcmp(real.grads[0].data(), mine.data(), mine.size() * sizeof(float))) << what;
        EXPECT_EQ(real.stats.bytesSent.at(0), simulated.stats.bytesSent.at(static_cast<size_t>(me))) << what;
        EXPECT_EQ(real.stats.nonFinite, poisoned) << what;
        EXPECT_EQ(simulated.stats.nonFinite, poisoned) << what;
      }
    }
  }
}

TEST(SmallAllReduceMpi, AgreesWithTheSimulation) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  auto valuesOf = [](int r) {
    return std::vector<float>{0.1f * static_cast<float>(r + 1), -static_cast<float>(r), 3.0f};
  };
  SimTransport sim(n);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    std::vector<float> mine = valuesOf(me);
    smallAllReduce(comm, std::vector<float*>{mine.data()}, 3, op);
    std::vector<std::vector<float>> world;
    std::vector<float*> p;
    for (int r = 0; r < n; ++r) world.push_back(valuesOf(r));
    for (auto& w : world) p.push_back(w.data());
    smallAllReduce(sim, p, 3, op);
    EXPECT_EQ(mine, world[static_cast<size_t>(me)]) << reduceOpName(op);
  }
  std::vector<float> mx = valuesOf(me);
  smallAllReduce(comm, std::vector<float*>{mx.data()}, 3, ReduceOp::Max);
  EXPECT_EQ(mx[0], 0.1f * static_cast<float>(n));
  EXPECT_EQ(mx[1], 0.0f);
}

}  // namespace
}  // namespace aps::comm
