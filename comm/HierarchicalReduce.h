#pragma once

#include "comm/AllReduceAlgorithm.h"
#include "comm/GradientReducer.h"
#include "precision/Codec.h"

namespace aps::comm {

// One bucket's hierarchical reduction (ReducerOptions::groupSize = G > 0; docs/ALGORITHMS.md,
// Hierarchical APS), on the world of bucket.transport (N ranks, G dividing N):
//   1. each group of G consecutive ranks runs options.hook's beforeReduce, `algorithm` and
//      its afterReduce on a SubTransport of the group: every member holds the group's fp32
//      sum (unscaled);
//   2. the N/G group leaders (ranks 0, G, 2G, ...) agree on the groups' non-finite flags and
//      run options.leaderHook's beforeReduce, `algorithm` and its afterReduce on their sums:
//      every leader holds the total;
//   3. each leader hands the total, raw fp32, and the non-finite flag to its group (a
//      scatter of G chunks, then an all-gather among the members).
// options.worldHook runs around all three with the world's context. A level with one rank is
// skipped: G = N is the flat reduction, and so is G = 1. Stochastic rounding draws from
// hierarchicalLevelContext (the bucket's own `context` where one level spans the world). Averaging is the caller's
// (reduceBucket). Bytes are counted per local rank over the three levels; every rank ends with the same bits, real or
// simulated.
SyncStats reduceBucketHierarchical(const AllReduceAlgorithm& algorithm, const BucketContext& bucket,
                                   const ReducerOptions& options, const precision::EncodeContext& context);

// The stochastic-rounding context of one level of a hierarchical reduction: level 1 of group
// `index`, or level 2 (index 0), derived from the bucket's context only.
precision::EncodeContext hierarchicalLevelContext(const precision::EncodeContext& base, int level, int index);

}  // namespace aps::comm
