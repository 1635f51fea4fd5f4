#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace aps::train {

// What a run ends with (the test metrics of the final evaluation).
struct TrainSummary {
  bool segmentation = false;
  double top1 = 0, top5 = 0, loss = 0;  // classification (fractions); loss may be inf or NaN
  double miou = 0, pixelAccuracy = 0;   // segmentation (fractions)
  int64_t steps = 0, skippedSteps = 0;
  double seconds = 0;
  bool diverged = false;  // a training or test loss, or the last step's gradients, were not finite
  int preemptedBy = 0;    // the signal that stopped the run after a checkpoint (no final evaluation)
  bool earlyStopped = false;  // eval.early_stopping ended training before its last step
};

// a + b for accumulated counts; throws aps::Error naming `what` instead of overflowing.
int64_t addCount(int64_t a, int64_t b, const char* what);

// The test metrics of one evaluation, accumulated batch by batch on each process and merged
// over processes. Counts are exact integers (checked against overflow); the loss is a double
// sum, so a diverged model's inf or NaN loss is reported as such.
class EvalAccumulator {
 public:
  EvalAccumulator(bool segmentation, int64_t classes);

  // A batch of n samples: logits (n, classes), labels (n), and the batch's mean loss.
  void addClassification(const float* logits, const int64_t* labels, int64_t n, double meanLoss);
  // A batch of n label maps of hw pixels: logits (n, classes, hw), labels (n, hw); labels
  // outside [0, classes) are ignored.
  void addSegmentation(const float* logits, const int64_t* labels, int64_t n, int64_t hw);

  // Merges the accumulators of every rank: `local` holds this process's local ranks' (in rank
  // order); `sumCounts` and `sumDoubles` take one vector per local rank and return the
  // element-wise sums over all ranks of the world, in rank order.
  using CountSum = std::function<std::vector<int64_t>(const std::vector<std::vector<int64_t>>&)>;
  using DoubleSum = std::function<std::vector<double>(const std::vector<std::vector<double>>&)>;
  static EvalAccumulator mergeOverRanks(const std::vector<EvalAccumulator>& local, const CountSum& sumCounts,
                                        const DoubleSum& sumDoubles);

  TrainSummary summary() const;
  const std::vector<int64_t>& counts() const { return counts_; }
  double lossSum() const { return lossSum_; }

 private:
  bool segmentation_;
  int64_t classes_;
  std::vector<int64_t> counts_;  // classification: {samples, top1, top5}; segmentation: confusion matrix
  double lossSum_ = 0;
};

// A metric for the JSON-lines file: finite values as numbers, inf and NaN as the strings
// "inf", "-inf" and "nan" (JSON has no such numbers; a null would hide what happened).
nlohmann::json metricValue(double v);

}  // namespace aps::train
