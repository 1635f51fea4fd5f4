// Hierarchical APS (comm.algorithm: hierarchical; docs/ALGORITHMS.md, Hierarchical APS) on
// simulated ranks: a degenerate hierarchy (G = N, G = 1) is the flat two_shot reduction bit
// for bit, a real one pays log2(G) and log2(N/G) bits of headroom instead of log2(N), every
// rank ends with the same bits, and bytes and non-finite flags are accounted for.
#include "comm/HierarchicalReduce.h"
#include "comm/SimTransport.h"
#include "comm/SubTransport.h"
#include "framework/core/Error.h"
#include "tests/comm/HierarchicalHarness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace aps::comm {
namespace {

using precision::ScalingMode;
using testing::hierarchicalGrads;
using testing::reduceStep;

std::vector<std::vector<float>> worldGrads(int world, uint64_t seed = 1) {
  std::vector<std::vector<float>> g;
  for (int r = 0; r < world; ++r) g.push_back(hierarchicalGrads(r, seed));
  return g;
}

void expectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

void expectAllRanksEqual(const testing::ReducedStep& r, const std::string& what) {
  for (size_t k = 1; k < r.grads.size(); ++k)
    expectSameBits(r.grads[0], r.grads[k], what + ", rank " + std::to_string(k));
}

struct Wire {
  std::string spec;
  ScalingMode mode;
};
const std::vector<Wire> kWires{{"fp32", ScalingMode::None},
                               {"e4m3", ScalingMode::Aps},
                               {"e4m3", ScalingMode::None},
                               {"e3m0", ScalingMode::Aps},
                               {"e4m3_ieee", ScalingMode::Global},
                               {"e5m2:stochastic", ScalingMode::Aps},
                               {"e4m3/block32", ScalingMode::None},
                               {"mxfp4", ScalingMode::None},
                               {"dettmers_dynamic/block256", ScalingMode::None}};

TEST(SubTransport, MapsItsRanksOntoTheParentsAndHostsTheLocalOnes) {
  SimTransport sim(8);
  SubTransport leaders(sim, 1, 2, 4);  // ranks 1, 3, 5, 7
  EXPECT_EQ(leaders.worldSize(), 4);
  EXPECT_EQ(leaders.localRankCount(), 4);
  EXPECT_EQ(leaders.parentRank(3), 7);
  // A round on the sub-world moves bytes between the parent's ranks.
  float a = 1.5f, b = 0.0f;
  const Message m{0, 3, &a, &b, sizeof(float)};
  leaders.exchange({&m, 1});
  EXPECT_EQ(b, 1.5f);
  EXPECT_THROW(SubTransport(sim, 1, 2, 5), Error);  // rank 9 does not exist
}

TEST(HierarchicalReduce, GroupOfTheWholeWorldIsTheFlatReductionBitForBit) {
  for (const Wire& w : kWires) {
    for (int world : {1, 3, 4}) {
      SimTransport a(world), b(world);
      const auto flat = reduceStep(a, worldGrads(world), w.spec, w.mode, 0);
      const auto hier = reduceStep(b, worldGrads(world), w.spec, w.mode, world);
      const std::string what = w.spec + " N=G=" + std::to_string(world);
      for (int r = 0; r < world; ++r)
        expectSameBits(flat.grads[static_cast<size_t>(r)], hier.grads[static_cast<size_t>(r)], what);
      EXPECT_EQ(flat.stats.bytesSent, hier.stats.bytesSent) << what;
      EXPECT_EQ(flat.groupShift, hier.groupShift) << what;
    }
  }
}

TEST(HierarchicalReduce, GroupsOfOneAreTheFlatReductionBitForBit) {
  for (const Wire& w : kWires) {
    for (int world : {2, 4, 5}) {
      SimTransport a(world), b(world);
      const auto flat = reduceStep(a, worldGrads(world), w.spec, w.mode, 0);
      const auto hier = reduceStep(b, worldGrads(world), w.spec, w.mode, 1);
      const std::string what = w.spec + " G=1 N=" + std::to_string(world);
      for (int r = 0; r < world; ++r)
        expectSameBits(flat.grads[static_cast<size_t>(r)], hier.grads[static_cast<size_t>(r)], what);
      EXPECT_EQ(flat.stats.bytesSent, hier.stats.bytesSent) << what;
      EXPECT_EQ(flat.groupShift, hier.leaderShift) << what;  // the leaders' level is the whole reduction
    }
  }
}

TEST(HierarchicalReduce, RealHierarchyEndsWithTheSameBitsOnEveryRankAndDiffersFromFlat) {
  for (const Wire& w : kWires) {
    SimTransport a(8), b(8);
    const auto flat = reduceStep(a, worldGrads(8), w.spec, w.mode, 0);
    const auto hier = reduceStep(b, worldGrads(8), w.spec, w.mode, 2);
    expectAllRanksEqual(hier, w.spec);
    // Unscaled E4M3 (largest 448) overflows on the layer of scale 200 both ways: the flag says so.
    EXPECT_EQ(hier.stats.nonFinite, flat.stats.nonFinite) << w.spec;
    EXPECT_EQ(hier.stats.nonFinite, w.spec == "e4m3" && w.mode == ScalingMode::None) << w.spec;
    if (hier.stats.nonFinite) continue;
    // Close to the flat result (both are sums of the same gradients), and for fp32 the
    // difference is only the order of additions.
    double err = 0, norm = 0;
    for (size_t i = 0; i < flat.grads[0].size(); ++i) {
      err += std::abs(static_cast<double>(flat.grads[0][i]) - hier.grads[0][i]);
      norm += std::abs(static_cast<double>(flat.grads[0][i]));
    }
    if (w.spec != "e3m0") {  // 4 bits: flat APS flushes much at 8 ranks
      EXPECT_LT(err, 0.5 * norm) << w.spec;
    }
    if (w.spec == "e4m3") {
      EXPECT_GT(err, 0.0) << "two levels of rounding cannot all coincide with one";
    }
  }
}

TEST(HierarchicalReduce, ApsPaysLog2GAndLog2NOverGBitsOfHeadroomNotLog2N) {
  // Every one of 8 ranks holds the layer {1, 0.1, ...}. Flat 8-way APS in E3M0 (largest 8,
  // smallest 0.25) scales the maximum to 8/8 = 1, so 0.1 becomes 0.1 < 0.125 and flushes.
  // With groups of 2 the group level scales to 8/2 = 4 (shift 2: one bit of headroom), 0.1
  // becomes 0.4 and rounds to 0.5; the leader level sees group sums {2, 0.25} and scales to
  // 8/4 = 2 (shift 0: two bits of headroom): 0.25 survives, and the sum is {8, 1}.
  const int world = 8;
  std::vector<std::vector<float>> grads(world, hierarchicalGrads(0));
  const size_t at = static_cast<size_t>(testing::kHierarchicalSizes[0] + testing::kHierarchicalSizes[1]);
  for (auto& g : grads) {
    std::fill(g.begin() + static_cast<std::ptrdiff_t>(at),
              g.begin() + static_cast<std::ptrdiff_t>(at) + testing::kHierarchicalSizes[2], 0.0f);
    g[at] = 1.0f;
    g[at + 1] = 0.1f;
  }
  SimTransport a(world), b(world);
  const auto flat = reduceStep(a, grads, "e3m0", ScalingMode::Aps, 0, false);
  const auto hier = reduceStep(b, grads, "e3m0", ScalingMode::Aps, 2, false);
  EXPECT_EQ(flat.groupShift[2], 0);   // 8 * 1 = 2^3 = 8: no room left
  EXPECT_EQ(hier.groupShift[2], 2);   // 2 * 1 -> 2^(3-1)
  EXPECT_EQ(hier.leaderShift[2], 0);  // 4 * 2 -> 2^(3-2) = 2 for the group sum 2
  EXPECT_EQ(flat.grads[0][at], 8.0f);
  EXPECT_EQ(flat.grads[0][at + 1], 0.0f) << "flat 8-way APS flushes 0.1 in E3M0";
  EXPECT_EQ(hier.grads[0][at], 8.0f);
  EXPECT_EQ(hier.grads[0][at + 1], 1.0f) << "1 bit + 2 bits of headroom keep it";
  expectAllRanksEqual(hier, "e3m0 headroom");
}

TEST(HierarchicalReduce, CountsEachLevelsBytes) {
  // fp32 on the wire, n divisible by every chunk count: two_shot over k ranks sends
  // 2 (k-1)/k * 4n bytes per rank (and no flag round: an fp32 result flags non-finite
  // inputs itself).
  const int world = 4;
  const int64_t n = 1000;
  SimTransport sim(world);
  std::vector<std::vector<float>> data(world, std::vector<float>(static_cast<size_t>(n), 0.5f));
  std::vector<float*> pointers;
  for (auto& d : data) pointers.push_back(d.data());
  const BucketLayout layout({n}, {0});
  auto algorithm = makeAllReduce({.kind = AllReduceKind::Native}, nullptr);
  ReducerOptions options;
  options.groupSize = 2;
  const SyncStats s = reduceBucket(*algorithm, {0, &layout.buckets()[0], &sim, pointers, 0}, options);
  const uint64_t level = 4 * n;  // two_shot over 2 ranks
  const uint64_t leader = level + 4 /* group flags */ + level + (4 * n + 1) /* to the other member */;
  EXPECT_EQ(s.bytesSent, (std::vector<uint64_t>{leader, level, leader, level}));
  for (auto& d : data) EXPECT_EQ(d[7], 2.0f);

  // 8 ranks in groups of 4: the leader scatters three chunks of 250 values (with a flag
  // byte each) and sends its own chunk to the three members; a member sends its chunk to
  // the two other members.
  SimTransport eight(8);
  std::vector<std::vector<float>> more(8, std::vector<float>(static_cast<size_t>(n), 0.25f));
  pointers.clear();
  for (auto& d : more) pointers.push_back(d.data());
  options.groupSize = 4;
  const SyncStats t = reduceBucket(*algorithm, {0, &layout.buckets()[0], &eight, pointers, 0}, options);
  const uint64_t group = 2 * 3 * 1000;  // two_shot over 4 ranks: 2 (3/4) 4n
  const uint64_t top = 4 + 4 * n;       // flags, two_shot over the 2 leaders
  const uint64_t chief = group + top + 3 * (1000 + 1) + 3 * 1000, member = group + 2 * 1000;
  EXPECT_EQ(t.bytesSent, (std::vector<uint64_t>{chief, member, member, member, chief, member, member, member}));
  for (auto& d : more) EXPECT_EQ(d[999], 2.0f);
}

TEST(HierarchicalReduce, NonFiniteInOneGroupReachesEveryRank) {
  // OCP E4M3 saturates: an infinity is hidden in the encoded sum, only the flag carries it.
  for (const char* wire : {"e4m3", "fp32"}) {
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      SimTransport sim(6);
      auto grads = worldGrads(6);
      grads[4][3] = bad;  // group 2 of three groups of two
      const auto r = reduceStep(sim, grads, wire, ScalingMode::Aps, 2);
      EXPECT_TRUE(r.stats.nonFinite) << wire << " " << bad;
    }
  }
}

TEST(HierarchicalReduce, LevelsAndGroupsDrawFromDistinctStreams) {
  const precision::EncodeContext base{9, 12345, 0};
  const auto g0 = hierarchicalLevelContext(base, 1, 0), g1 = hierarchicalLevelContext(base, 1, 1),
             top = hierarchicalLevelContext(base, 2, 0);
  EXPECT_NE(g0.stream, base.stream);
  EXPECT_NE(g0.stream, g1.stream);
  EXPECT_NE(g0.stream, top.stream);
  EXPECT_NE(g1.stream, top.stream);
  EXPECT_EQ(g0.seed, base.seed);
  EXPECT_EQ(hierarchicalLevelContext(base, 1, 1).stream, g1.stream);  // deterministic
}

TEST(HierarchicalReduce, RefusesAGroupSizeThatDoesNotDivideTheWorld) {
  SimTransport sim(6);
  EXPECT_THROW(reduceStep(sim, worldGrads(6), "e4m3", ScalingMode::Aps, 4), Error);
}

}  // namespace
}  // namespace aps::comm
