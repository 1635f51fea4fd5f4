#pragma once

#include "comm/GradientReducer.h"
#include "precision/ApsScaler.h"
#include "precision/FloatFormat.h"
#include "precision/Fp8LmScaler.h"
#include "precision/HybridPolicy.h"
#include "precision/QuantizationStats.h"
#include "precision/Quantizer.h"
#include "precision/RoundingMode.h"

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace aps::comm {

// Auto Precision Scaling around a bucket's all-reduce (Han, Demmel, You; arXiv 1911.08907;
// docs/ALGORITHMS.md, APS). Before the reduction, every layer (parameter) of the bucket gets the
// shift s_l = emax - ceil(log2(N * max|g_l|)) agreed by a MAX over all ranks (one value per
// layer: an all-gather of the local maxima, the "one extra tiny all-reduce"); each rank's
// gradient is multiplied by 2^s_l, exactly. After the reduction the sum is multiplied by
// 2^-s_l. Formats with no scaler (fp32 or mode none) pass through untouched.
//
// Instead of APS, a format may use FP8-LM's automatic scaler (docs/ALGORITHMS.md, FP8-LM automatic scaling): every
// rank multiplies by the shared scale mu (the minimum over ranks), the reduced sum is divided
// by it again, and finishStep() updates mu from the saturation counts of all ranks.
//
// With error feedback, what quantization drops from each rank's (compensated, scaled)
// gradient is kept per rank and parameter, in gradient units, and added to the next step's
// gradient before scaling. The residual is measured by quantizing the scaled gradient with
// the format and rounding mode the wire uses; with stochastic rounding that draw is not the
// wire's own draw (an unbiased estimate of the dropped part, not the exact one).
//
// It also measures, per layer, what quantizing local rank 0's (scaled) gradient does:
// values flushed to zero, values saturated, relative error; the trainer reports them.
class BucketScaling {
 public:
  struct FormatScaling {
    std::shared_ptr<const precision::ApsScaler> scaler;  // null: no APS scaling for this format
    std::shared_ptr<precision::Fp8LmScaler> autoscaler;  // set: FP8-LM automatic scaling instead
    std::optional<precision::FloatFormat> format;        // set: measure quantisation statistics
    precision::RoundingMode rounding = precision::RoundingMode::NearestEven;
    bool errorFeedback = false;  // needs `format`
  };

  // perFormat[f]: what to do for buckets of wire-format id f; paramCount: parameters in all;
  // localRanks: ranks of this process (simulated ranks each keep their own residuals).
  BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow, int localRanks = 1);

  // Replaces the per-format settings (hybrid precision widened a layer and the reducer was
  // rebuilt with new format ids); statistics, residuals and scaler states stay.
  void setFormats(std::vector<FormatScaling> perFormat);

  // After the step's buckets are reduced (the communication thread idle): the autoscalers
  // agree on the step's saturation counts over all ranks and update mu, identically everywhere.
  void finishStep(Transport& transport);

  // The GradientReducer's hooks (ReducerOptions::beforeReduce / afterReduce).
  void beforeReduce(const BucketContext& bucket);
  void afterReduce(const BucketContext& bucket);
  // Installs both hooks on `options`; the scaling must outlive the reducer.
  void install(ReducerOptions& options);

  // The shift parameter p got in the last step (0 when unscaled).
  int lastShift(int param) const;
  // Quantisation statistics of parameter p over the window.
  precision::QuantizationCounts statistics(int param) const;
  // Applies hybrid precision's automatic rule to the statistics (HybridPolicy::adapt).
  std::vector<size_t> adapt(precision::HybridPolicy& policy);
  // Restarts parameter p's statistics window.
  void resetStatistics(int param);

  // Checkpoint state: the statistics windows, and local rank i's error-feedback residual of
  // parameter p (empty until the first step that used it).
  std::vector<int64_t> statisticsState() const;
  void setStatisticsState(const std::vector<int64_t>& state);
  const std::vector<float>& residual(int localRank, int param) const;
  void setResidual(int localRank, int param, std::vector<float> values);

 private:
  std::vector<FormatScaling> perFormat_;
  std::vector<std::unique_ptr<precision::Quantizer>> quantizers_;
  mutable std::mutex mutex_;
  std::vector<int> shifts_;    // per parameter
  std::vector<float> scales_;  // per parameter: the autoscaler's factor this step (1: none)
  precision::LayerStatistics stats_;
  std::vector<std::vector<std::vector<float>>> residuals_;  // [local rank][parameter]
  // This step's autoscale counts per format: saturated values of each local rank, and
  // values seen per rank.
  std::vector<std::vector<float>> saturated_;
  std::vector<int64_t> seen_;
  std::vector<int64_t> reducedSaturated_;  // saturated values of the reduced sums, per format
};

}  // namespace aps::comm
