#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"
#include "framework/train/EvalMetrics.h"

#include <cstdint>
#include <string>

namespace aps::train {

// Watches one metric of the evaluations during training (eval.monitor) for
// checkpoint.keep_best and eval.early_stopping, as PyTorch Lightning's ModelCheckpoint and
// EarlyStopping do: an evaluation improves on the best only by more than `minDelta` (higher is
// better, the loss lower); `stale` counts the evaluations in a row since the last improvement.
// Its state travels in checkpoints (the "monitor" section), so a resumed run keeps its best.
class EvalMonitor : public Stateful {
 public:
  // `metric`: top1, top5, loss, miou, pixel_accuracy, or auto (top1; miou for segmentation).
  // Throws aps::Error when the metric is not one the model's evaluations report.
  EvalMonitor(const std::string& metric, double minDelta, bool segmentation);

  const std::string& metric() const { return metric_; }
  double value(const TrainSummary& summary) const;
  // Records an evaluation made after `step`; true when it improved on the best.
  bool observe(const TrainSummary& summary, int64_t step);

  bool seen() const { return bestStep_ >= 0; }
  double best() const { return best_; }
  int64_t bestStep() const { return bestStep_; }
  int64_t stale() const { return stale_; }

  NamedTensors stateDict() const override;
  // A checkpoint without the section (written before it existed) leaves the monitor fresh.
  void loadStateDict(const NamedTensors& state) override;

 private:
  std::string metric_;
  double minDelta_;
  bool lowerIsBetter_;
  double best_ = 0;
  int64_t bestStep_ = -1, stale_ = 0;
};

}  // namespace aps::train
