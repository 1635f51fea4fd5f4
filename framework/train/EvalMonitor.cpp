#include "framework/train/EvalMonitor.h"

#include "framework/core/Error.h"

#include <bit>
#include <cmath>

namespace aps::train {

EvalMonitor::EvalMonitor(const std::string& metric, double minDelta, bool segmentation)
    : metric_(metric == "auto" ? (segmentation ? "miou" : "top1") : metric),
      minDelta_(minDelta),
      lowerIsBetter_(metric_ == "loss") {
  const bool segmentationMetric = metric_ == "miou" || metric_ == "pixel_accuracy";
  const bool classificationMetric = metric_ == "top1" || metric_ == "top5" || metric_ == "loss";
  APS_CHECK(segmentation ? segmentationMetric : classificationMetric,
            "eval.monitor = '{}' is not reported by a {} model's evaluations (use {})", metric_,
            segmentation ? "segmentation" : "classification",
            segmentation ? "miou or pixel_accuracy" : "top1, top5 or loss");
}

double EvalMonitor::value(const TrainSummary& s) const {
  if (metric_ == "top1") return s.top1;
  if (metric_ == "top5") return s.top5;
  if (metric_ == "loss") return s.loss;
  if (metric_ == "miou") return s.miou;
  return s.pixelAccuracy;
}

bool EvalMonitor::observe(const TrainSummary& summary, int64_t step) {
  const double v = value(summary);
  // A NaN or infinite loss never improves anything.
  const bool improved =
      std::isfinite(v) && (!seen() || (lowerIsBetter_ ? v < best_ - minDelta_ : v > best_ + minDelta_));
  if (improved) {
    best_ = v;
    bestStep_ = step;
    stale_ = 0;
  } else {
    ++stale_;
  }
  return improved;
}

// One int64 tensor: the best value's bits (a double), its step, the stale count.
NamedTensors EvalMonitor::stateDict() const {
  Tensor state = Tensor::zeros({3}, DType::Int64);
  state.data<int64_t>()[0] = std::bit_cast<int64_t>(best_);
  state.data<int64_t>()[1] = bestStep_;
  state.data<int64_t>()[2] = stale_;
  return {{"state", state}};
}

void EvalMonitor::loadStateDict(const NamedTensors& state) {
  if (state.empty()) return;
  const Tensor* t = findTensor(state, "state");
  APS_CHECK(t != nullptr && t->dtype() == DType::Int64 && t->numel() == 3,
            "it must hold 'state', three int64 (best value's bits, its step, evaluations since)");
  const Tensor values = t->contiguous();
  best_ = std::bit_cast<double>(values.data<int64_t>()[0]);
  bestStep_ = values.data<int64_t>()[1];
  stale_ = values.data<int64_t>()[2];
  APS_CHECK(bestStep_ >= -1 && stale_ >= 0, "'state': step {} or count {} is out of range", bestStep_, stale_);
}

}  // namespace aps::train
