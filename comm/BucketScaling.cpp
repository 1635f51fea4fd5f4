#include "comm/BucketScaling.h"

#include "comm/ExchangeSchedule.h"
#include "framework/core/Error.h"

#include <algorithm>

namespace aps::comm {

void allReduceMax(Transport& transport, std::span<const std::vector<float>> local, std::vector<float>& values) {
  APS_CHECK(static_cast<int>(local.size()) == transport.localRankCount(), "allReduceMax: {} vectors for {} local ranks",
            local.size(), transport.localRankCount());
  const size_t n = local.empty() ? 0 : local[0].size();
  const int world = transport.worldSize();
  std::vector<float> gathered(n * static_cast<size_t>(world));
  std::vector<const void*> send;
  for (const auto& v : local) {
    APS_CHECK(v.size() == n, "allReduceMax: local vectors differ in length ({} and {})", v.size(), n);
    send.push_back(v.data());
  }
  std::vector<size_t> counts(static_cast<size_t>(world), n * sizeof(float));
  std::vector<size_t> offsets(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) offsets[static_cast<size_t>(r)] = static_cast<size_t>(r) * n * sizeof(float);
  ExchangeSchedule schedule(transport, {});
  schedule.allGatherShared(send, counts, offsets, gathered.data());
  values.assign(n, -std::numeric_limits<float>::infinity());
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const float v = gathered[static_cast<size_t>(r) * n + i];
      // NaN wins: a non-finite exponent must reach every rank.
      if (std::isnan(v) || v > values[i]) values[i] = std::isnan(values[i]) ? values[i] : v;
    }
  }
}

BucketScaling::BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow)
    : perFormat_(std::move(perFormat)), shifts_(paramCount, 0), stats_(paramCount, statsWindow) {
  for (const auto& f : perFormat_) {
    quantizers_.push_back(f.format ? std::make_unique<precision::Quantizer>(*f.format) : nullptr);
  }
}

void BucketScaling::beforeReduce(Transport& transport, int b, const BucketLayout::Bucket& bucket,
                                 std::span<float* const> data) {
  (void)b;
  const FormatScaling& scaling = perFormat_.at(static_cast<size_t>(bucket.format));
  const size_t layers = bucket.params.size();
  auto layerOf = [&](size_t local, size_t k) {
    const int64_t end = k + 1 < layers ? bucket.offsets[k + 1] : bucket.count;
    return precision::LayerGradient{data[local] + bucket.offsets[k], end - bucket.offsets[k]};
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
      for (size_t i = 0; i < data.size(); ++i) {
        if (static_cast<size_t>(n) == layers) {
          perLocal[i] = localExponents[i];
        } else {  // Global mode: one value, the max over this rank's layers
          APS_ASSERT(n == 1);
          float m = precision::ApsScaler::kZeroExponent;
          for (float e : localExponents[i]) m = (std::isnan(e) || e > m) ? e : m;
          perLocal[i][0] = m;
        }
      }
      std::vector<float> out;
      allReduceMax(transport, perLocal, out);
      std::copy(out.begin(), out.end(), values);
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
      const auto counts = precision::QuantizationCounts::measure(layer.data, q.data(), layer.size,
                                                                 quantizer->format().maxValue());
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.record(static_cast<size_t>(bucket.params[k]), counts);
    }
  }
}

void BucketScaling::afterReduce(int b, const BucketLayout::Bucket& bucket, std::span<float* const> data) {
  (void)b;
  const size_t layers = bucket.params.size();
  for (size_t k = 0; k < layers; ++k) {
    int s = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s = shifts_[static_cast<size_t>(bucket.params[k])];
    }
    if (s == 0) continue;
    const int64_t end = k + 1 < layers ? bucket.offsets[k + 1] : bucket.count;
    for (float* d : data) precision::scaleByPowerOfTwo(d + bucket.offsets[k], end - bucket.offsets[k], -s);
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
