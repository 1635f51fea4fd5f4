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

BucketScaling::BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow)
    : perFormat_(std::move(perFormat)), shifts_(paramCount, 0), stats_(paramCount, statsWindow) {
  for (const auto& f : perFormat_) {
    quantizers_.push_back(f.format ? std::make_unique<precision::Quantizer>(*f.format) : nullptr);
  }
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
  if (const auto& quantizer = quantizers_.at(static_cast<size_t>(bucket.format))) {
    std::vector<float> q;
    for (size_t k = 0; k < layers; ++k) {
      const auto layer = layerOf(0, k);
      q.resize(static_cast<size_t>(layer.size));
      quantizer->quantize(layer.data, q.data(), layer.size, scaling.rounding);
      const auto counts =
          precision::QuantizationCounts::measure(layer.data, q.data(), layer.size, quantizer->format().maxValue());
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.record(static_cast<size_t>(bucket.params[k]), counts);
    }
  }
}

void BucketScaling::afterReduce(const BucketContext& context) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const size_t layers = bucket.params.size();
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

int BucketScaling::lastShift(int param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shifts_.at(static_cast<size_t>(param));
}

precision::QuantizationCounts BucketScaling::statistics(int param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.window(static_cast<size_t>(param));
}

}  // namespace aps::comm
