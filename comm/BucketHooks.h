#pragma once

#include "comm/GradientReducer.h"
#include "framework/tensor/Stateful.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "precision/ApsScaler.h"
#include "precision/ErrorFeedback.h"
#include "precision/Fp8LmScaler.h"
#include "precision/HybridPolicy.h"
#include "precision/QuantizationStats.h"
#include "precision/Quantizer.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace aps::comm {

// The scale each parameter of a bucket carries during its reduction: 2^shift from APS (or
// global scaling) and a factor from FP8-LM's mu. Scaling hooks set it, later hooks read it
// (error feedback converts its residual back to gradient units), and afterReduce undoes it.
class ParamScales {
 public:
  explicit ParamScales(size_t params) : shifts_(params, 0), factors_(params, 1.0f) {}
  void reset(size_t param);
  void setShift(size_t param, int shift);
  void setFactor(size_t param, float factor);
  int shift(size_t param) const;
  float factor(size_t param) const;

 private:
  mutable std::mutex mutex_;  // written by the communication thread, read by the trainer
  std::vector<int> shifts_;
  std::vector<float> factors_;
};

// One mechanism around a bucket's all-reduce, like a PyTorch DDP comm hook: it sees every
// local rank's flat buffer before the reduction and the reduced sums after it, keeps its own
// state (and saves it, where a resume needs it), and agrees with other ranks only through
// comm::smallAllReduce on the bucket's transport, so simulated and real ranks stay identical.
// Hooks are chained (BucketScaling): beforeReduce in chain order, afterReduce in reverse.
// What a hook keeps across steps and a resume needs it saves and loads itself (Stateful: its
// own entry names, this process's local ranks); a hook whose state lasts one step saves none.
class BucketHook : public Stateful {
 public:
  virtual ~BucketHook() = default;
  virtual void beforeReduce(const BucketContext& bucket, ParamScales& scales) = 0;
  virtual void afterReduce(const BucketContext& /*bucket*/, ParamScales& /*scales*/) {}
  // Whether beforeReduce changes the bucket's values (then what was measured of them before,
  // BucketContext::maxAbsBits, no longer holds for the hooks after it).
  virtual bool changesValues(const BucketContext& /*bucket*/) const { return false; }
  // Whether beforeReduce reads the bucket's values as the reduction will reduce them: the
  // input shifts an earlier hook left for the reduction (InputFacts::shifts) are then applied
  // to the buffers first (BucketScaling). false: it reads nothing, or applies them itself.
  virtual bool readsValues(const BucketContext& /*bucket*/) const { return true; }
  // After the step's buckets are reduced (the communication thread idle).
  virtual void finishStep(Transport& /*transport*/) {}
  // Buffers on a GPU (BucketContext::device): whether the hook runs on them itself; if not,
  // BucketScaling hands it a host copy wherever it uses the buffers (below), and copies back
  // what it changed: the CPU's arithmetic, at the cost of the copies.
  virtual bool runsOnDevice() const { return false; }
  // Whether beforeReduce, and afterReduce, read or write the bucket's buffers at all.
  virtual bool usesBuffersBefore(const BucketContext& /*bucket*/) const { return true; }
  virtual bool usesBuffersAfter(const BucketContext& /*bucket*/) const { return true; }
  NamedTensors stateDict() const override { return {}; }
  void loadStateDict(const NamedTensors& /*state*/) override {}
};

// The values of the k-th parameter of a bucket (parameters lie back to back in the flat buffer).
int64_t layerSize(const BucketLayout::Bucket& bucket, size_t k);

// Each parameter of a bucket that the bucket's values [begin, begin + n) touch: f(k, at, length)
// for the k-th parameter of the bucket, its piece at [begin + at, begin + at + length).
template <typename F>
void forEachLayerPiece(const BucketLayout::Bucket& bucket, int64_t begin, int64_t n, F f) {
  const int64_t end = begin + n;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const int64_t lo = std::max(begin, bucket.offsets[k]);
    const int64_t hi = std::min(end, bucket.offsets[k] + layerSize(bucket, k));
    if (lo < hi) f(k, lo - begin, hi - lo);
  }
}

// measurePerLayer's counts of buffers in the memory of GPU `device`: counted there (the same
// bits), read back with one wait, as (k, counts) pairs.
std::vector<std::pair<size_t, precision::QuantizationCounts>> measurePerLayerOnDevice(
    const BucketLayout::Bucket& bucket, int64_t begin, int64_t n, const float* values, const float* decoded,
    float maxValue, int device);

// What an encode of the bucket's values [begin, begin + n) (`values`, decoding to `decoded`, in
// the memory of `device`) did to each parameter the range touches: add(k, counts) for the k-th
// parameter of the bucket.
template <typename Add>
void measurePerLayer(const BucketLayout::Bucket& bucket, int64_t begin, int64_t n, const float* values,
                     const float* decoded, float maxValue, Device device, Add add) {
  if (device.isCuda()) {
    for (const auto& [k, counts] : measurePerLayerOnDevice(bucket, begin, n, values, decoded, maxValue, device.index))
      add(k, counts);
    return;
  }
  forEachLayerPiece(bucket, begin, n, [&](size_t k, int64_t at, int64_t length) {
    add(k, precision::QuantizationCounts::measure(values + at, decoded + at, length, maxValue));
  });
}

// Error feedback, first half: last step's residual joins this step's gradient, before any
// scaling. The residuals (precision::ErrorFeedback, one per local rank) are shared with
// ErrorFeedbackCapture, which computes them.
// On a GPU's buckets the residuals live in device memory (onDevice); one loaded from a
// checkpoint moves there at its first use. Callers hold `mutex`.
struct ErrorFeedbackState {
  ErrorFeedbackState(size_t params, int localRanks);
  mutable std::mutex mutex;
  std::vector<precision::ErrorFeedback> perRank;  // [local rank], one residual per parameter
  std::vector<std::vector<std::unique_ptr<cuda::DeviceScratch>>> onDevice;  // [local rank][parameter]

  // Local rank i's residual of `param` in the memory of GPU `device`, n values: the one there,
  // else the host's moved there, else (create) a new one of unset values, else null.
  float* deviceResidual(size_t i, size_t param, int64_t n, int device, bool create);
  // Local rank i's residual of `param`, wherever it lives (copied back from a GPU, on the
  // calling thread's current stream).
  std::vector<float> residual(size_t i, size_t param) const;
  // Local rank i's residual of `param` set on the host (a GPU's copy dropped).
  void setResidual(size_t i, size_t param, std::vector<float> values);
};
class ErrorFeedbackCompensate : public BucketHook {
 public:
  ErrorFeedbackCompensate(std::shared_ptr<ErrorFeedbackState> state, std::vector<bool> enabled)
      : state_(std::move(state)), enabled_(std::move(enabled)) {}
  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  bool changesValues(const BucketContext& bucket) const override;
  bool readsValues(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool usesBuffersBefore(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool usesBuffersAfter(const BucketContext& /*bucket*/) const override { return false; }
  bool runsOnDevice() const override { return true; }

 private:
  std::shared_ptr<ErrorFeedbackState> state_;
  std::vector<bool> enabled_;  // per wire format
};

// Auto Precision Scaling (docs/ALGORITHMS.md, APS): per layer, the shift agreed by a MAX over
// all ranks; every rank's gradient is multiplied by 2^shift, the sum by 2^-shift after. Where
// the context can take them (BucketContext::inputs), the shifts are left to the reduction
// (InputFacts::shifts) instead of scaling every rank's buffer in place. On a GPU's buffers it
// reads the layers' maxima there (one small copy back per bucket) and scales there.
class ApsHook : public BucketHook {
 public:
  explicit ApsHook(std::vector<std::shared_ptr<const precision::ApsScaler>> perFormat)
      : perFormat_(std::move(perFormat)) {}
  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  void afterReduce(const BucketContext& bucket, ParamScales& scales) override;
  bool changesValues(const BucketContext& bucket) const override;
  bool readsValues(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool runsOnDevice() const override { return true; }

 private:
  std::vector<std::shared_ptr<const precision::ApsScaler>> perFormat_;  // null: none for that format
};

// FP8-LM's automatic scaling (docs/ALGORITHMS.md, FP8-LM automatic scaling): every rank
// multiplies by the shared mu (the minimum over ranks), the sum is divided by it again, and
// finishStep() updates mu from the saturation counts of all ranks.
class Fp8LmHook : public BucketHook {
 public:
  explicit Fp8LmHook(std::vector<std::shared_ptr<precision::Fp8LmScaler>> perFormat, int localRanks);
  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  void afterReduce(const BucketContext& bucket, ParamScales& scales) override;
  bool changesValues(const BucketContext& bucket) const override;
  bool readsValues(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool usesBuffersBefore(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool usesBuffersAfter(const BucketContext& bucket) const override { return changesValues(bucket); }
  bool runsOnDevice() const override { return true; }
  void finishStep(Transport& transport) override;

 private:
  std::vector<std::shared_ptr<precision::Fp8LmScaler>> perFormat_;  // null: none for that format
  std::mutex mutex_;
  std::vector<std::vector<float>> saturated_;  // [format][local rank]: saturated values this step
  std::vector<int64_t> seen_;                  // [format]: values per rank this step
  std::vector<int64_t> reducedSaturated_;      // [format]: saturated values of the reduced sums
  std::vector<uint8_t> reducedNonFinite_;      // [format]: a reduced sum held NaN or inf
};

// What quantizing local rank 0's scaled gradient does, per layer: values flushed to zero,
// saturated, relative error, over a window of steps (hybrid precision decides from it).
// Besides, as an EncodeObserver of the all-reduce, what re-encoding the sums does (the
// two_shot owner's encode, every ring hop's): counted on every rank, summed over all ranks in
// finishStep, kept in a window of its own (outputWindow) that hybrid precision does not read.
class StatisticsHook : public BucketHook, public EncodeObserver {
 public:
  StatisticsHook(size_t params, int window)
      : stats_(params, window), outStats_(params, window), stepOut_(params), touched_(params, 0) {}
  void setQuantizers(std::vector<std::shared_ptr<const precision::Quantizer>> perFormat,
                     std::vector<precision::RoundingMode> rounding);
  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  // It applies the input shifts left for the reduction to its own copy of rank 0's values.
  bool readsValues(const BucketContext& /*bucket*/) const override { return false; }
  bool usesBuffersBefore(const BucketContext& bucket) const override;
  bool usesBuffersAfter(const BucketContext& /*bucket*/) const override { return false; }
  bool runsOnDevice() const override { return true; }

  precision::QuantizationCounts window(size_t param) const;
  std::vector<size_t> adapt(precision::HybridPolicy& policy);
  void reset(size_t param);
  // "statistics" and "statistics_out": both windows (precision::LayerStatistics::serialize).
  // A state without "statistics_out" (written before it was kept) leaves that window fresh.
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

  // The re-encoded sums: this hook observes the bucket's all-reduce when its format has a
  // quantizer (else null); finishStep sums the step's counts over all ranks into the window.
  EncodeObserver* observerFor(const BucketContext& bucket);
  bool observes(Site site) const override { return site == Site::Sum; }
  // On a GPU the counts are made there and read back (one wait per encode).
  bool readsDeviceMemory() const override { return observedDevice_.isCuda(); }
  void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) override;
  void finishStep(Transport& transport) override;
  precision::QuantizationCounts outputWindow(size_t param) const;

 private:
  std::vector<std::shared_ptr<const precision::Quantizer>> quantizers_;  // per format; null: float32 or not float
  std::vector<precision::RoundingMode> rounding_;
  mutable std::mutex mutex_;
  precision::LayerStatistics stats_;
  precision::LayerStatistics outStats_;                 // the re-encoded sums, summed over ranks
  std::vector<precision::QuantizationCounts> stepOut_;  // per parameter: this step, this process's ranks
  std::vector<uint8_t> touched_;                        // per parameter: observed this step
  const BucketLayout::Bucket* observed_ = nullptr;      // the bucket being reduced (communication thread)
  float observedMax_ = 0.0f;
  Device observedDevice_ = Device::cpu();
};

// Error feedback, second half: what quantization drops from each local rank's compensated,
// scaled gradient, back in gradient units. The residual is measured by quantizing with the
// wire's format and rounding mode; with stochastic rounding that draw is not the wire's own
// (an unbiased estimate of the dropped part, not the exact one).
//
// It saves the residuals it computes where some wire format has feedback: "residual_sizes"
// (int64, per parameter: 0 for a residual never made, else its length; the same on every
// rank) and "residual.<i>" (float32, local rank i's residuals back to back). A state without
// "residual_sizes" leaves the residuals at zero (a checkpoint of another world size, whose
// ranks were others).
class ErrorFeedbackCapture : public BucketHook {
 public:
  ErrorFeedbackCapture(std::shared_ptr<ErrorFeedbackState> state,
                       std::vector<std::shared_ptr<const precision::Quantizer>> perFormat,
                       std::vector<precision::RoundingMode> rounding)
      : state_(std::move(state)), quantizers_(std::move(perFormat)), rounding_(std::move(rounding)) {}
  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  bool readsValues(const BucketContext& bucket) const override;
  bool usesBuffersBefore(const BucketContext& bucket) const override { return readsValues(bucket); }
  bool usesBuffersAfter(const BucketContext& /*bucket*/) const override { return false; }
  bool runsOnDevice() const override { return true; }
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

 private:
  std::shared_ptr<ErrorFeedbackState> state_;
  std::vector<std::shared_ptr<const precision::Quantizer>> quantizers_;  // per format; null: no feedback
  std::vector<precision::RoundingMode> rounding_;
};

}  // namespace aps::comm
