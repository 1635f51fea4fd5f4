#include "framework/train/EvalMetrics.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps::train {

int64_t addCount(int64_t a, int64_t b, const char* what) {
  int64_t sum = 0;
  APS_CHECK(!__builtin_add_overflow(a, b, &sum), "{}: the count {} + {} overflows a 64-bit integer", what, a, b);
  return sum;
}

EvalAccumulator::EvalAccumulator(bool segmentation, int64_t classes)
    : segmentation_(segmentation),
      classes_(classes),
      counts_(segmentation ? static_cast<size_t>(classes * classes) : 3, 0) {}

void EvalAccumulator::addClassification(const float* logits, const int64_t* labels, int64_t n, double meanLoss) {
  lossSum_ += meanLoss * static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * classes_;
    const int64_t label = labels[i];
    APS_CHECK(label >= 0 && label < classes_, "test label {} is outside [0, {})", label, classes_);
    int64_t higher = 0;  // classes scoring above the true one: the rank of the label
    for (int64_t c = 0; c < classes_; ++c) higher += row[c] > row[label] ? 1 : 0;
    counts_[0] = addCount(counts_[0], 1, "test samples");
    counts_[1] = addCount(counts_[1], higher == 0 ? 1 : 0, "top-1 hits");
    counts_[2] = addCount(counts_[2], higher < 5 ? 1 : 0, "top-5 hits");
  }
}

void EvalAccumulator::addSegmentation(const float* logits, const int64_t* labels, int64_t n, int64_t hw) {
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t i = 0; i < hw; ++i) {
      const int64_t label = labels[s * hw + i];
      if (label < 0 || label >= classes_) continue;  // ignore index
      int64_t best = 0;
      for (int64_t c = 1; c < classes_; ++c) {
        if (logits[(s * classes_ + c) * hw + i] > logits[(s * classes_ + best) * hw + i]) best = c;
      }
      auto& cell = counts_[static_cast<size_t>(label * classes_ + best)];
      cell = addCount(cell, 1, "confusion matrix");
    }
  }
}

EvalAccumulator EvalAccumulator::mergeOverRanks(const std::vector<EvalAccumulator>& local, const CountSum& sumCounts,
                                                const DoubleSum& sumDoubles) {
  APS_CHECK(!local.empty(), "evaluation: no local rank to merge");
  std::vector<std::vector<int64_t>> counts;
  std::vector<std::vector<double>> losses;
  for (const EvalAccumulator& a : local) {
    counts.push_back(a.counts_);
    losses.push_back({a.lossSum_});
  }
  EvalAccumulator merged(local[0].segmentation_, local[0].classes_);
  merged.counts_ = sumCounts(counts);
  merged.lossSum_ = sumDoubles(losses)[0];
  return merged;
}

TrainSummary EvalAccumulator::summary() const {
  TrainSummary s;
  s.segmentation = segmentation_;
  if (!segmentation_) {
    const double n = static_cast<double>(std::max<int64_t>(counts_[0], 1));
    s.top1 = static_cast<double>(counts_[1]) / n;
    s.top5 = static_cast<double>(counts_[2]) / n;
    s.loss = lossSum_ / n;
    s.diverged = !std::isfinite(s.loss);
    return s;
  }
  double iouSum = 0, correct = 0, total = 0;
  int present = 0;
  for (int64_t c = 0; c < classes_; ++c) {
    const auto at = [&](int64_t r, int64_t k) {
      return static_cast<double>(counts_[static_cast<size_t>(r * classes_ + k)]);
    };
    double row = 0, col = 0;
    for (int64_t k = 0; k < classes_; ++k) {
      row += at(c, k);
      col += at(k, c);
    }
    const double tp = at(c, c);
    correct += tp;
    total += row;
    if (row + col - tp > 0) {
      iouSum += tp / (row + col - tp);
      ++present;
    }
  }
  s.miou = present ? iouSum / present : 0.0;
  s.pixelAccuracy = total > 0 ? correct / total : 0.0;
  return s;
}

nlohmann::json metricValue(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace aps::train
