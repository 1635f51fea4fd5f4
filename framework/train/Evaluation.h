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
  int64_t samples = 0;        // the first `samples` test samples; 0: all
  int shards = 1, shard = 0;  // this process evaluates samples shard, shard + shards, ...
  int64_t batchSize = 1;
  int workers = 1, prefetch = 1;
  uint64_t seed = 0;
  autograd::ComputePrecision compute;
  EvalAccumulator::CountSum sumCounts;  // element-wise sums over processes (identity for one)
  EvalAccumulator::DoubleSum sumDoubles;
};

// Evaluates `model` (in eval mode, without gradients) on `testSet`: top-1, top-5 and mean
// loss for classification, mIoU and pixel accuracy for segmentation. Collective over the
// processes when setup.shards > 1.
TrainSummary evaluate(nn::Module& model, const std::shared_ptr<const data::Dataset>& testSet, const EvalSetup& setup);

}  // namespace aps::train
