#pragma once

#include "framework/autograd/ComputePrecision.h"
#include "framework/train/EvalMetrics.h"

#include <cstdint>
#include <memory>

namespace aps::data {
class Dataset;
}
namespace aps::nn {
class Module;
}

namespace aps::train {

// How one evaluation runs: which test samples this process takes, how they are loaded, the
// compute precision, and how the totals are summed over processes.
struct EvalSetup {
  int64_t classes = 0;
  bool segmentation = false;
  int64_t samples = 0;  // the first `samples` test samples; 0: all
  // The test set is split into `shards` (one per rank): shard k holds samples k, k + shards, ...
  // This process evaluates shards firstShard .. firstShard + localShards - 1, one per local rank.
  int shards = 1, firstShard = 0, localShards = 1;
  int64_t batchSize = 1;
  int workers = 1, prefetch = 1;
  uint64_t seed = 0;
  autograd::ComputePrecision compute;
  EvalAccumulator::CountSum sumCounts;  // element-wise sums over every rank (EvalAccumulator)
  EvalAccumulator::DoubleSum sumDoubles;
};

// Evaluates `model` (in eval mode, without gradients) on `testSet`: top-1, top-5 and mean
// loss for classification, mIoU and pixel accuracy for segmentation. Each rank, real or
// simulated, evaluates its own shard in the same batches, so a simulated world reports the
// same bits as the real one. Collective over the processes.
TrainSummary evaluate(nn::Module& model, const std::shared_ptr<const data::Dataset>& testSet, const EvalSetup& setup);

}  // namespace aps::train
