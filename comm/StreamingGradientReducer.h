#pragma once

#include "comm/BucketLayout.h"
#include "comm/GradientReducer.h"
#include "comm/StreamingAllReduce.h"

#include <memory>
#include <vector>

namespace aps::comm {

// GradientReducer for a simulated world too large to hold every rank's gradients (a
// `world_size: 256` study on one machine): the trainer runs virtual rank 0's micro-batch,
// calls addRank(), runs rank 1's, calls addRank(), ... and finish() leaves in the gradients
// the bits GradientReducer gives every rank with the same buckets, algorithms, formats and
// options (same encode contexts per step and bucket, same averaging). Memory: one fp32
// accumulator per bucket instead of one gradient copy per rank. Bucket hooks (APS) need
// every rank's gradient before the reduction and are not supported here.
class StreamingGradientReducer {
 public:
  StreamingGradientReducer(int worldSize, std::vector<NamedGradient> grads,
                           std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms,
                           std::vector<int> formats = {}, ReducerOptions options = {});

  int worldSize() const { return world_; }
  const BucketLayout& layout() const { return layout_; }

  // Folds the registered gradients, as they are now, in as the next virtual rank's.
  void addRank();
  // After worldSize() addRank calls: writes the reduced gradients and returns the step's
  // stats (bytesSent has one entry per virtual rank; nothing overlaps, so exposed = comm).
  StepCommStats finish();

 private:
  int world_;
  ReducerOptions options_;
  std::vector<NamedGradient> grads_;
  BucketLayout layout_;
  std::vector<std::unique_ptr<StreamingAllReduce>> streams_;  // one per bucket
  std::vector<float> flat_;                                   // one bucket's values
  int added_ = 0;
  uint64_t step_ = 0;
  double seconds_ = 0.0;
};

}  // namespace aps::comm
