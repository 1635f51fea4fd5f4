#pragma once
// One step of the bucketed reducer, flat or hierarchical (comm.algorithm: hierarchical), with
// APS hooks at every level, on any transport: the sim tests compare hierarchical with flat
// two_shot, the MPI test compares real ranks with the simulation.
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

namespace aps::comm::testing {

// Layers of very different magnitudes (APS gives each its own shift), spread over buckets.
inline const std::vector<int64_t> kHierarchicalSizes{37, 0, 260, 5, 900, 64, 1};

inline std::vector<float> hierarchicalGrads(int rank, uint64_t seed = 1) {
  Rng rng(seed * 7919 + static_cast<uint64_t>(rank));
  const float scales[] = {1e-6f, 1.0f, 3e-3f, 200.0f, 0.05f, 1e-4f, 7.0f};
  std::vector<float> g;
  for (size_t l = 0; l < kHierarchicalSizes.size(); ++l)
    for (int64_t i = 0; i < kHierarchicalSizes[l]; ++i) g.push_back(rng.normal() * scales[l]);
  return g;
}

struct ReducedStep {
  std::vector<std::vector<float>> grads;  // [local rank] flat gradients after the step
  StepCommStats stats;
  std::vector<int> groupShift, leaderShift;  // per layer, the last shift of each level (flat: groupShift)
};

// grads[i]: the flat gradients of local rank transport.firstLocalRank() + i. groupSize 0:
// flat two_shot; otherwise hierarchical with groups of groupSize.
inline ReducedStep reduceStep(Transport& transport, std::vector<std::vector<float>> grads, const std::string& wire,
                              precision::ScalingMode mode, int groupSize, bool average = true) {
  const int world = transport.worldSize();
  const precision::CodecSpec spec = precision::CodecSpec::parse(wire);
  auto codec = std::shared_ptr<const precision::Codec>(precision::makeCodec(spec));
  auto algorithm = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({.kind = AllReduceKind::TwoShot}, codec));
  const size_t layers = kHierarchicalSizes.size();
  ReducerOptions options;
  options.bucketCapBytes = 2048;
  options.firstBucketCapBytes = 512;
  options.average = average;
  options.seed = 5;
  const int groupRanks = groupSize > 0 ? groupSize : world;
  auto group = std::make_shared<BucketScaling>(
      std::vector<BucketScaling::FormatScaling>{BucketScaling::FormatScaling::forSpec(spec, mode, groupRanks, false)},
      layers, 4, transport.localRankCount());
  auto leaders =
      std::make_shared<BucketScaling>(std::vector<BucketScaling::FormatScaling>{BucketScaling::FormatScaling::forSpec(
                                          spec, mode, world / groupRanks, false)},
                                      layers, 4, transport.localRankCount());
  group->install(options);
  if (groupSize > 0) {
    options.groupSize = groupSize;
    leaders->installLeaderLevel(options);
  }
  std::vector<std::vector<NamedGradient>> named(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    int64_t at = 0;
    for (size_t l = 0; l < layers; ++l) {
      named[i].push_back({fmt::format("l{}", l), {grads[i].data() + at, kHierarchicalSizes[l]}});
      at += kHierarchicalSizes[l];
    }
  }
  ReducedStep out;
  {
    GradientReducer reducer(transport, named, {algorithm}, {}, options);
    for (int p = static_cast<int>(layers) - 1; p >= 0; --p)
      for (int i = 0; i < transport.localRankCount(); ++i) reducer.markReady(p, i);
    out.stats = reducer.wait();
  }
  for (size_t l = 0; l < layers; ++l) {
    out.groupShift.push_back(group->lastShift(static_cast<int>(l)));
    out.leaderShift.push_back(leaders->lastShift(static_cast<int>(l)));
  }
  out.grads = std::move(grads);
  return out;
}

}  // namespace aps::comm::testing
