// The fidelity probe (comm/FidelityProbe.h, docs/ALGORITHMS.md, Fidelity probe) on simulated
// ranks: exact for fp32, the same figures as a direct computation for e4m3, counts summed over
// every rank and every ring hop, records only on its steps, and the reduction's bits unchanged.
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "precision/Quantizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace aps::comm {
namespace {

constexpr int64_t kA = 40, kB = 24;  // two layers: "a" around 1, "b" around 1e-3 (partly below e4m3's 2^-9)

// Rank k's raw gradient: deterministic, distinct per rank.
std::vector<float> gradientOf(int rank) {
  Rng rng(100 + static_cast<uint64_t>(rank));
  std::vector<float> g(kA + kB);
  for (int64_t i = 0; i < kA + kB; ++i) g[static_cast<size_t>(i)] = rng.normal() * (i < kA ? 1.0f : 1e-3f);
  return g;
}

struct ProbeRun {
  std::vector<std::vector<float>> grads;                 // [rank] after the last step
  std::vector<std::optional<ProbeRecord>> records;       // [step]
  std::vector<precision::QuantizationCounts> outWindow;  // [layer]: the statistics' re-encoded sums
};

// `steps` steps of the two-layer model on `world` simulated ranks, `kind` over `codecName`, no
// scaling, probe every `interval` steps (0: none); groupSize > 0: the hierarchical reduction
// over groups of that many ranks, wired as the trainer wires it.
ProbeRun reduce(int world, AllReduceKind kind, const std::string& codecName, int64_t interval, int steps = 1,
                int groupSize = 0) {
  SimTransport transport(world);
  ProbeRun r;
  r.grads.assign(static_cast<size_t>(world), {});
  std::vector<std::vector<NamedGradient>> named(static_cast<size_t>(world));
  for (int k = 0; k < world; ++k) {
    auto& g = r.grads[static_cast<size_t>(k)];
    g.resize(kA + kB);
    named[static_cast<size_t>(k)] = {{"a", {g.data(), kA}}, {"b", {g.data() + kA, kB}}};
  }
  const precision::CodecSpec spec = precision::CodecSpec::parse(codecName);
  AllReduceOptions ao;
  ao.kind = kind;
  auto algorithm = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce(ao, precision::makeCodec(spec)));
  ReducerOptions options;
  options.average = true;
  auto fs = BucketScaling::FormatScaling::forSpec(spec, precision::ScalingMode::None, world, false);
  BucketScaling scaling({fs}, 2, 10, world, interval);
  BucketScaling leaders({fs}, 2, 10, world);
  scaling.install(options);
  if (groupSize > 0) {
    options.groupSize = groupSize;
    leaders.installLeaderLevel(options);
    scaling.installWorldLevel(options, leaders);
  }
  GradientReducer reducer(transport, std::move(named), {algorithm}, {}, options);
  for (int step = 0; step < steps; ++step) {
    for (int k = 0; k < world; ++k) {  // into the registered buffers
      const std::vector<float> g = gradientOf(k + step);
      std::copy(g.begin(), g.end(), r.grads[static_cast<size_t>(k)].begin());
    }
    for (int k = 0; k < world; ++k) {
      reducer.markReady(1, k);
      reducer.markReady(0, k);
    }
    reducer.wait();
    scaling.finishStep(transport);
    r.records.push_back(scaling.takeProbe());
  }
  for (int layer = 0; layer < 2; ++layer) r.outWindow.push_back(scaling.outputStatistics(layer));
  return r;
}

TEST(FidelityProbe, Fp32NativeIsExact) {
  for (const auto kind : {AllReduceKind::Native, AllReduceKind::TwoShot}) {
    const ProbeRun r = reduce(4, kind, "fp32", 1);
    ASSERT_TRUE(r.records[0].has_value());
    ASSERT_EQ(r.records[0]->layers.size(), 2u);
    for (const ProbeLayer& l : r.records[0]->layers) {
      EXPECT_TRUE(l.probed);
      EXPECT_EQ(l.relError, 0.0);
      EXPECT_EQ(l.cosine, 1.0);
      EXPECT_EQ(l.in.flushed, 0);
      EXPECT_EQ(l.out.flushed, 0);
      EXPECT_EQ(l.in.saturated, 0);
    }
  }
}

// Two-shot e4m3 without scaling, computed directly: every rank's contribution quantized, summed
// in fp32 in rank order, the sum re-encoded and decoded; against the fp32 rank-order sum.
TEST(FidelityProbe, E4m3TwoShotMatchesADirectComputation) {
  const int world = 4;
  const ProbeRun r = reduce(world, AllReduceKind::TwoShot, "e4m3", 1);
  ASSERT_TRUE(r.records[0].has_value());
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  const precision::Quantizer q(e4m3);
  const auto n = static_cast<size_t>(kA + kB);
  std::vector<float> exact(n, 0.0f), sum(n, 0.0f), lp(n);
  int64_t inNonzero[2] = {0, 0}, inFlushed[2] = {0, 0}, outNonzero[2] = {0, 0}, outFlushed[2] = {0, 0};
  for (int k = 0; k < world; ++k) {
    const std::vector<float> g = gradientOf(k);
    std::vector<float> gq(n);
    q.quantize(g.data(), gq.data(), static_cast<int64_t>(n), precision::RoundingMode::NearestEven);
    for (size_t i = 0; i < n; ++i) {
      exact[i] += g[i];
      sum[i] += gq[i];
      const int layer = i < static_cast<size_t>(kA) ? 0 : 1;
      inNonzero[layer] += g[i] != 0.0f;
      inFlushed[layer] += g[i] != 0.0f && gq[i] == 0.0f;
    }
  }
  q.quantize(sum.data(), lp.data(), static_cast<int64_t>(n), precision::RoundingMode::NearestEven);
  for (size_t i = 0; i < n; ++i) {
    const int layer = i < static_cast<size_t>(kA) ? 0 : 1;
    outNonzero[layer] += sum[i] != 0.0f;
    outFlushed[layer] += sum[i] != 0.0f && lp[i] == 0.0f;
  }
  EXPECT_GT(inFlushed[1], 0);  // the small layer loses values below 2^-10
  for (int layer = 0; layer < 2; ++layer) {
    const size_t begin = layer == 0 ? 0 : static_cast<size_t>(kA), end = layer == 0 ? static_cast<size_t>(kA) : n;
    double d2 = 0, e2 = 0, l2 = 0, dot = 0;
    for (size_t i = begin; i < end; ++i) {
      d2 += (static_cast<double>(lp[i]) - exact[i]) * (static_cast<double>(lp[i]) - exact[i]);
      e2 += static_cast<double>(exact[i]) * exact[i];
      l2 += static_cast<double>(lp[i]) * lp[i];
      dot += static_cast<double>(lp[i]) * exact[i];
    }
    const ProbeLayer& l = r.records[0]->layers[static_cast<size_t>(layer)];
    EXPECT_DOUBLE_EQ(l.relError, std::sqrt(d2 / e2)) << "layer " << layer;
    EXPECT_DOUBLE_EQ(l.cosine, dot / std::sqrt(l2 * e2)) << "layer " << layer;
    EXPECT_GT(l.relError, 0.0);
    EXPECT_EQ(l.in.total, world * static_cast<int64_t>(end - begin));  // every rank's contribution
    EXPECT_EQ(l.in.nonzero, inNonzero[layer]);
    EXPECT_EQ(l.in.flushed, inFlushed[layer]);
    EXPECT_EQ(l.out.total, static_cast<int64_t>(end - begin));  // the owners' encodes: each value once
    EXPECT_EQ(l.out.nonzero, outNonzero[layer]);
    EXPECT_EQ(l.out.flushed, outFlushed[layer]);
    EXPECT_EQ(l.in.saturated, 0);
  }
}

TEST(FidelityProbe, HierarchicalWithOneGroupGivesTheFlatFigures) {
  const ProbeRun flat = reduce(4, AllReduceKind::TwoShot, "e4m3", 1);
  const ProbeRun hier = reduce(4, AllReduceKind::TwoShot, "e4m3", 1, 1, 4);
  ASSERT_TRUE(flat.records[0] && hier.records[0]);
  for (size_t layer = 0; layer < 2; ++layer) {
    const ProbeLayer &a = flat.records[0]->layers[layer], &b = hier.records[0]->layers[layer];
    EXPECT_EQ(a.relError, b.relError);
    EXPECT_EQ(a.cosine, b.cosine);
    EXPECT_EQ(a.in.total, b.in.total);
    EXPECT_EQ(a.in.flushed, b.in.flushed);
    EXPECT_EQ(a.out.total, b.out.total);
    EXPECT_EQ(a.out.flushed, b.out.flushed);
  }
  EXPECT_EQ(flat.grads, hier.grads);
}

// 4 ranks as 2 groups of 2: every value is encoded by its rank, each group's owners re-encode
// the group sums, the leaders encode those sums again for the second level and its owners
// re-encode the total. The probe compares the total with the exact sum over all four ranks
// and counts the first encodes as inputs and every later one as a re-encoded sum.
TEST(FidelityProbe, HierarchicalComparesTheWorldSumAndCountsBothLevels) {
  const int world = 4, group = 2;
  const ProbeRun r = reduce(world, AllReduceKind::TwoShot, "e4m3", 1, 1, group);
  ASSERT_TRUE(r.records[0].has_value());
  const precision::Quantizer q(precision::FloatFormat::preset("e4m3"));
  const auto n = static_cast<size_t>(kA + kB);
  const auto quantize = [&](std::vector<float> v) {
    q.quantize(v.data(), v.data(), static_cast<int64_t>(v.size()), precision::RoundingMode::NearestEven);
    return v;
  };
  std::vector<float> exact(n, 0.0f), total(n, 0.0f);
  for (int g = 0; g < world / group; ++g) {
    std::vector<float> sum(n, 0.0f);
    for (int k = g * group; k < (g + 1) * group; ++k) {
      const std::vector<float> raw = gradientOf(k), encoded = quantize(raw);
      for (size_t i = 0; i < n; ++i) exact[i] += raw[i], sum[i] += encoded[i];
    }
    const std::vector<float> groupSum = quantize(quantize(sum));  // owner's re-encode, then the leader's
    for (size_t i = 0; i < n; ++i) total[i] += groupSum[i];
  }
  const std::vector<float> lp = quantize(total);
  for (int layer = 0; layer < 2; ++layer) {
    const size_t begin = layer == 0 ? 0 : static_cast<size_t>(kA), end = layer == 0 ? static_cast<size_t>(kA) : n;
    double d2 = 0, e2 = 0;
    for (size_t i = begin; i < end; ++i) {
      d2 += (static_cast<double>(lp[i]) - exact[i]) * (static_cast<double>(lp[i]) - exact[i]);
      e2 += static_cast<double>(exact[i]) * exact[i];
    }
    const ProbeLayer& l = r.records[0]->layers[static_cast<size_t>(layer)];
    EXPECT_DOUBLE_EQ(l.relError, std::sqrt(d2 / e2)) << "layer " << layer;
    const auto size = static_cast<int64_t>(end - begin);
    EXPECT_EQ(l.in.total, world * size);  // every rank's own encode
    // Two groups' owner encodes, two leaders' encodes, the second level's owner encodes.
    EXPECT_EQ(l.out.total, (2 + 2 + 1) * size);
  }
  for (int k = 0; k < world; ++k) {  // the trainer's result: the mean of the low-precision total
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r.grads[static_cast<size_t>(k)][i], lp[i] / static_cast<float>(world));
  }
}

TEST(FidelityProbe, RingCountsEveryHopsReencode) {
  const int world = 4;
  const ProbeRun r = reduce(world, AllReduceKind::Ring, "e4m3", 1);
  ASSERT_TRUE(r.records[0].has_value());
  const ProbeLayer& a = r.records[0]->layers[0];
  EXPECT_EQ(a.in.total, world * kA);
  EXPECT_EQ(a.out.total, (world - 1) * kA);  // N-1 reduce-scatter hops re-encode every value
  EXPECT_GT(a.relError, 0.0);
  EXPECT_LT(a.relError, 0.2);
  EXPECT_GT(a.cosine, 0.98);
}

// The statistics hook counts the re-encoded sums every step (its own window, summed over every
// rank): on a probed step the same counts as the probe's.
TEST(FidelityProbe, StatisticsCountTheReencodedSumsToo) {
  for (const auto kind : {AllReduceKind::TwoShot, AllReduceKind::Ring}) {
    const ProbeRun r = reduce(4, kind, "e3m0", 1);
    ASSERT_TRUE(r.records[0].has_value());
    for (size_t layer = 0; layer < 2; ++layer) {
      const auto& probe = r.records[0]->layers[layer].out;
      const auto& stats = r.outWindow[layer];
      EXPECT_GT(stats.total, 0);
      EXPECT_EQ(stats.total, probe.total);
      EXPECT_EQ(stats.nonzero, probe.nonzero);
      EXPECT_EQ(stats.flushed, probe.flushed);
      EXPECT_EQ(stats.saturated, probe.saturated);
    }
    EXPECT_GT(r.outWindow[0].nonzero, 0);
  }
  const ProbeRun fp32 = reduce(4, AllReduceKind::TwoShot, "fp32", 0);
  EXPECT_EQ(fp32.outWindow[0].total, 0);  // no statistics for fp32
}

TEST(FidelityProbe, RecordsOnlyOnItsStepsAndChangesNoBits) {
  for (const auto kind : {AllReduceKind::TwoShot, AllReduceKind::Ring, AllReduceKind::AllGather}) {
    const ProbeRun probed = reduce(3, kind, "e4m3", 2, 5);
    const ProbeRun plain = reduce(3, kind, "e4m3", 0, 5);
    for (int step = 0; step < 5; ++step) {
      EXPECT_EQ(probed.records[static_cast<size_t>(step)].has_value(), step % 2 == 0) << "step " << step;
      EXPECT_FALSE(plain.records[static_cast<size_t>(step)].has_value());
      if (probed.records[static_cast<size_t>(step)]) {
        EXPECT_EQ(probed.records[static_cast<size_t>(step)]->step, static_cast<uint64_t>(step));
      }
    }
    EXPECT_EQ(probed.grads, plain.grads);  // the probe observes, it does not change the reduction
  }
}

}  // namespace
}  // namespace aps::comm
