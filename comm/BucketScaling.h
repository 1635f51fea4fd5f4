#pragma once

#include "comm/GradientReducer.h"
#include "precision/ApsScaler.h"
#include "precision/FloatFormat.h"
#include "precision/QuantizationStats.h"
#include "precision/Quantizer.h"
#include "precision/RoundingMode.h"

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace aps::comm {

// Auto Precision Scaling around a bucket's all-reduce (Han, Demmel, You; arXiv 1911.08907;
// PAPERS.md section 1). Before the reduction, every layer (parameter) of the bucket gets the
// shift s_l = emax - ceil(log2(N * max|g_l|)) agreed by a MAX over all ranks (one value per
// layer: an all-gather of the local maxima, the "one extra tiny all-reduce"); each rank's
// gradient is multiplied by 2^s_l, exactly. After the reduction the sum is multiplied by
// 2^-s_l. Formats with no scaler (fp32 or mode none) pass through untouched.
//
// It also measures, per layer, what quantizing local rank 0's (scaled) gradient does:
// values flushed to zero, values saturated, relative error; the trainer reports them.
class BucketScaling {
 public:
  struct FormatScaling {
    std::shared_ptr<const precision::ApsScaler> scaler;  // null: no scaling for this format
    std::optional<precision::FloatFormat> format;        // set: measure quantisation statistics
    precision::RoundingMode rounding = precision::RoundingMode::NearestEven;
  };

  // perFormat[f]: what to do for buckets of wire-format id f; paramCount: parameters in all.
  BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow);

  // The GradientReducer's hooks (ReducerOptions::beforeReduce / afterReduce).
  void beforeReduce(const BucketContext& bucket);
  void afterReduce(const BucketContext& bucket);
  // Installs both hooks on `options`; the scaling must outlive the reducer.
  void install(ReducerOptions& options);

  // The shift parameter p got in the last step (0 when unscaled).
  int lastShift(int param) const;
  // Quantisation statistics of parameter p over the window.
  precision::QuantizationCounts statistics(int param) const;

 private:
  std::vector<FormatScaling> perFormat_;
  std::vector<std::unique_ptr<precision::Quantizer>> quantizers_;
  mutable std::mutex mutex_;
  std::vector<int> shifts_;  // per parameter
  precision::LayerStatistics stats_;
};

}  // namespace aps::comm
