#include "comm/BucketScaling.h"

#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"

#include <algorithm>

namespace aps::comm {

namespace {
// Values of the k-th parameter of a bucket (parameters lie back to back in the flat buffer).
int64_t layerSize(const BucketLayout::Bucket& bucket, size_t k) {
  const int64_t end = k + 1 < bucket.params.size() ? bucket.offsets[k + 1] : bucket.count;
  return end - bucket.offsets[k];
}
}  // namespace

BucketScaling::BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow, int localRanks)
    : shifts_(paramCount, 0),
      scales_(paramCount, 1.0f),
      stats_(paramCount, statsWindow),
      residuals_(static_cast<size_t>(localRanks), std::vector<std::vector<float>>(paramCount)) {
  APS_CHECK(localRanks >= 1, "bucket scaling: {} local ranks", localRanks);
  setFormats(std::move(perFormat));
}

void BucketScaling::setFormats(std::vector<FormatScaling> perFormat) {
  std::lock_guard<std::mutex> lock(mutex_);
  perFormat_ = std::move(perFormat);
  quantizers_.clear();
  for (const auto& f : perFormat_) {
    APS_CHECK(!f.errorFeedback || f.format, "bucket scaling: error feedback needs a float wire format");
    quantizers_.push_back(f.format ? std::make_unique<precision::Quantizer>(*f.format) : nullptr);
  }
  saturated_.assign(perFormat_.size(), std::vector<float>(residuals_.size(), 0.0f));
  seen_.assign(perFormat_.size(), 0);
  reducedSaturated_.assign(perFormat_.size(), 0);
}

void BucketScaling::install(ReducerOptions& options) {
  options.beforeReduce = [this](const BucketContext& c) { beforeReduce(c); };
  options.afterReduce = [this](const BucketContext& c) { afterReduce(c); };
}

void BucketScaling::beforeReduce(const BucketContext& context) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const std::span<float* const> data = context.data;
  const FormatScaling& scaling = perFormat_.at(static_cast<size_t>(bucket.format));
  const size_t layers = bucket.params.size();
  auto layerOf = [&](size_t local, size_t k) {
    return precision::LayerGradient{data[local] + bucket.offsets[k], layerSize(bucket, k)};
  };
  auto paramOf = [&](size_t k) { return static_cast<size_t>(bucket.params[k]); };
  {
    // Nothing scaled yet this step (a layer may have changed format since the last one).
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t k = 0; k < layers; ++k) {
      shifts_[paramOf(k)] = 0;
      scales_[paramOf(k)] = 1.0f;
    }
  }
  if (scaling.errorFeedback) {  // last step's residual joins this step's gradient
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
      for (size_t k = 0; k < layers; ++k) {
        const std::vector<float>& r = residuals_[i][paramOf(k)];
        if (r.empty()) continue;
        float* g = data[i] + bucket.offsets[k];
        for (size_t j = 0; j < r.size(); ++j) g[j] += r[j];
      }
    }
  }
  if (scaling.scaler && scaling.scaler->mode() != precision::ScalingMode::None) {
    const precision::ApsScaler& scaler = *scaling.scaler;
    // Every local rank's exponents; the MAX over ranks is taken by the callback, which
    // folds in the other local ranks (simulated ranks) and then the remote ones.
    std::vector<std::vector<float>> localExponents;
    for (size_t i = 0; i < data.size(); ++i) {
      std::vector<precision::LayerGradient> g;
      for (size_t k = 0; k < layers; ++k) g.push_back(layerOf(i, k));
      localExponents.push_back(scaler.localExponents(g));
    }
    std::vector<precision::LayerGradient> first;
    for (size_t k = 0; k < layers; ++k) first.push_back(layerOf(0, k));
    const auto reduceMax = [&](float* values, int64_t n) {
      std::vector<std::vector<float>> perLocal(data.size(), std::vector<float>(static_cast<size_t>(n)));
      std::vector<float*> pointers;
      for (size_t i = 0; i < data.size(); ++i) {
        if (static_cast<size_t>(n) == layers) {
          perLocal[i] = localExponents[i];
        } else {  // Global mode: one value, the max over this rank's layers
          APS_ASSERT(n == 1);
          perLocal[i][0] = *std::max_element(localExponents[i].begin(), localExponents[i].end());
        }
        pointers.push_back(perLocal[i].data());
      }
      smallAllReduce(*context.transport, pointers, n, ReduceOp::Max);
      std::copy(perLocal[0].begin(), perLocal[0].end(), values);
    };
    const auto shifts = scaler.shifts(first, reduceMax);
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t k = 0; k < layers; ++k) {
      const int s = shifts.shift[k];
      shifts_[static_cast<size_t>(bucket.params[k])] = s;
      if (s == 0) continue;
      for (size_t i = 0; i < data.size(); ++i) {
        const auto layer = layerOf(i, k);
        precision::scaleByPowerOfTwo(data[i] + bucket.offsets[k], layer.size, s);
      }
    }
  }
  if (scaling.autoscaler) {
    // All ranks use the smallest mu (FP8-LM); mu is the same everywhere unless a rank resumed
    // differently, so this tiny agreement is a guard that costs one value per bucket.
    const auto reduceMax = [&](float* values, int64_t n) {
      std::vector<std::vector<float>> perLocal(data.size(), std::vector<float>(values, values + n));
      std::vector<float*> pointers;
      for (auto& v : perLocal) pointers.push_back(v.data());
      smallAllReduce(*context.transport, pointers, n, ReduceOp::Max);
      std::copy(perLocal[0].begin(), perLocal[0].end(), values);
    };
    const float scale = scaling.autoscaler->sharedScale(reduceMax);
    std::vector<float> saturated(data.size(), 0.0f);
    for (size_t i = 0; i < data.size(); ++i) {
      for (int64_t j = 0; j < bucket.count; ++j) data[i][j] *= scale;
      saturated[i] = static_cast<float>(scaling.autoscaler->countSaturated(data[i], bucket.count));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t k = 0; k < layers; ++k) scales_[paramOf(k)] = scale;
    const auto f = static_cast<size_t>(bucket.format);
    for (size_t i = 0; i < data.size(); ++i) saturated_[f][i] += saturated[i];
    seen_[f] += bucket.count;
  }
  const auto& quantizer = quantizers_.at(static_cast<size_t>(bucket.format));
  if (!quantizer) return;
  // Statistics from local rank 0; error feedback needs every local rank's residual.
  const size_t measured = scaling.errorFeedback ? data.size() : 1;
  std::vector<float> q;
  for (size_t i = 0; i < measured; ++i) {
    for (size_t k = 0; k < layers; ++k) {
      const auto layer = layerOf(i, k);
      q.resize(static_cast<size_t>(layer.size));
      quantizer->quantize(layer.data, q.data(), layer.size, scaling.rounding);
      std::lock_guard<std::mutex> lock(mutex_);
      if (i == 0) {
        stats_.record(paramOf(k), precision::QuantizationCounts::measure(layer.data, q.data(), layer.size,
                                                                         quantizer->format().maxValue()));
      }
      if (!scaling.errorFeedback) continue;
      // residual = intended - sent, back in gradient units (exact power-of-two unscaling).
      std::vector<float>& r = residuals_[i][paramOf(k)];
      r.resize(static_cast<size_t>(layer.size));
      for (int64_t j = 0; j < layer.size; ++j) r[static_cast<size_t>(j)] = layer.data[j] - q[static_cast<size_t>(j)];
      precision::scaleByPowerOfTwo(r.data(), layer.size, -shifts_[paramOf(k)]);
      const float scale = scales_[paramOf(k)];
      if (scale != 1.0f) {
        for (float& v : r) v /= scale;
      }
    }
  }
}

void BucketScaling::afterReduce(const BucketContext& context) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const size_t layers = bucket.params.size();
  const FormatScaling& scaling = perFormat_.at(static_cast<size_t>(bucket.format));
  if (scaling.autoscaler && layers > 0) {
    float scale = 1.0f;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      scale = scales_[static_cast<size_t>(bucket.params[0])];
    }
    // The reduced sum is the same on every rank: its saturated values count once.
    const int64_t saturated = scaling.autoscaler->countSaturated(context.data[0], bucket.count);
    for (float* d : context.data)
      for (int64_t j = 0; j < bucket.count; ++j) d[j] /= scale;
    std::lock_guard<std::mutex> lock(mutex_);
    reducedSaturated_[static_cast<size_t>(bucket.format)] += saturated;
  }
  for (size_t k = 0; k < layers; ++k) {
    int s = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s = shifts_[static_cast<size_t>(bucket.params[k])];
    }
    if (s == 0) continue;
    for (float* d : context.data) precision::scaleByPowerOfTwo(d + bucket.offsets[k], layerSize(bucket, k), -s);
  }
}

void BucketScaling::finishStep(Transport& transport) {
  for (size_t f = 0; f < perFormat_.size(); ++f) {
    const auto& scaler = perFormat_[f].autoscaler;
    if (!scaler || seen_[f] == 0) continue;
    std::vector<float*> pointers;
    for (float& v : saturated_[f]) pointers.push_back(&v);
    smallAllReduce(transport, pointers, 1, ReduceOp::Sum);
    const auto world = static_cast<int64_t>(transport.worldSize());
    scaler->update(static_cast<int64_t>(saturated_[f][0]) + reducedSaturated_[f], seen_[f] * (world + 1));
    std::fill(saturated_[f].begin(), saturated_[f].end(), 0.0f);
    seen_[f] = 0;
    reducedSaturated_[f] = 0;
  }
}

std::vector<size_t> BucketScaling::adapt(precision::HybridPolicy& policy) {
  std::lock_guard<std::mutex> lock(mutex_);
  return policy.adapt(stats_);
}

void BucketScaling::resetStatistics(int param) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset(static_cast<size_t>(param));
}

std::vector<int64_t> BucketScaling::statisticsState() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.serialize();
}

void BucketScaling::setStatisticsState(const std::vector<int64_t>& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.restore(state);
}

const std::vector<float>& BucketScaling::residual(int localRank, int param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return residuals_.at(static_cast<size_t>(localRank)).at(static_cast<size_t>(param));
}

void BucketScaling::setResidual(int localRank, int param, std::vector<float> values) {
  std::lock_guard<std::mutex> lock(mutex_);
  residuals_.at(static_cast<size_t>(localRank)).at(static_cast<size_t>(param)) = std::move(values);
}

int BucketScaling::lastShift(int param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shifts_.at(static_cast<size_t>(param));
}

precision::QuantizationCounts BucketScaling::statistics(int param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.window(static_cast<size_t>(param));
}

}  // namespace aps::comm
