#include "comm/FidelityProbe.h"

#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aps::comm {

namespace {
// In and out counts per layer.
constexpr size_t kPacked = precision::QuantizationCounts::kPacked;
constexpr size_t kCountsPerLayer = 2 * kPacked;
}  // namespace

FidelityProbe::FidelityProbe(size_t params, int64_t interval) : interval_(interval), params_(params) {
  APS_CHECK(interval >= 0, "fidelity probe: interval {} is negative", interval);
  AllReduceOptions options;
  options.kind = AllReduceKind::Native;
  options.checkFinite = false;
  shadowAlgorithm_ = makeAllReduce(options, nullptr);
}

void FidelityProbe::setMaxValues(std::vector<float> perFormat) { maxValues_ = std::move(perFormat); }

void FidelityProbe::beforeReduce(const BucketContext& context, ParamScales& /*scales*/) {
  active_ = false;
  if (!due(context.step, interval_)) return;
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto n = static_cast<size_t>(bucket.count);
  // Every local rank's raw gradient, summed exactly: fp32 in rank order through the transport.
  std::vector<std::vector<float>> copies;
  std::vector<float*> pointers;
  for (float* d : context.data) copies.emplace_back(d, d + n);
  for (auto& c : copies) pointers.push_back(c.data());
  shadowAlgorithm_->run(context.agreementTransport(), pointers, bucket.count);
  shadow_ = std::move(copies[0]);
  bucket_ = &bucket;
  const auto f = static_cast<size_t>(bucket.format);
  maxValue_ = f < maxValues_.size() ? maxValues_[f] : std::numeric_limits<float>::infinity();
  in_.assign(bucket.params.size(), {});
  out_.assign(bucket.params.size(), {});
  active_ = true;
}

EncodeObserver* FidelityProbe::observerFor(const BucketContext& /*bucket*/) { return active_ ? this : nullptr; }

EncodeObserver* FidelityProbe::leaderObserverFor(const BucketContext& /*bucket*/) {
  return active_ ? &leaderLevel_ : nullptr;
}

void FidelityProbe::encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) {
  if (!active_) return;
  auto& counts = site == Site::Input ? in_ : out_;
  measurePerLayer(*bucket_, begin, n, values, decoded, maxValue_,
                  [&](size_t k, const precision::QuantizationCounts& c) { counts[k] += c; });
}

void FidelityProbe::afterReduce(const BucketContext& context, ParamScales& /*scales*/) {
  if (!active_) return;
  active_ = false;
  const BucketLayout::Bucket& bucket = *context.layout;
  const size_t layers = bucket.params.size();
  // The counts of every rank: this process's sum travels as local rank 0's share (integers:
  // the total does not depend on how ranks are spread over processes).
  const size_t bytes = layers * kCountsPerLayer * sizeof(int64_t);
  // One share per local rank (the context may carry local rank 0's result buffer alone).
  const auto localRanks = static_cast<size_t>(context.agreementTransport().localRankCount());
  std::vector<std::vector<int64_t>> mine(localRanks, std::vector<int64_t>(layers * kCountsPerLayer, 0));
  for (size_t k = 0; k < layers; ++k) {
    in_[k].pack(mine[0].data() + k * kCountsPerLayer);
    out_[k].pack(mine[0].data() + k * kCountsPerLayer + kPacked);
  }
  std::vector<const void*> minePointers;
  for (const auto& m : mine) minePointers.push_back(m.data());
  const auto world = static_cast<size_t>(context.agreementTransport().worldSize());
  std::vector<int64_t> all(world * layers * kCountsPerLayer, 0);
  allGatherBytes(context.agreementTransport(), minePointers, bytes, all.data());

  const float* lp = context.data[0];  // the low-precision sum, every scaling undone
  std::lock_guard<std::mutex> lock(mutex_);
  if (!record_ || record_->step != context.step) {
    record_ = ProbeRecord{context.step, std::vector<ProbeLayer>(params_)};
  }
  for (size_t k = 0; k < layers; ++k) {
    ProbeLayer layer;
    layer.probed = true;
    double diff2 = 0.0, exact2 = 0.0, lp2 = 0.0, dot = 0.0;
    const int64_t begin = bucket.offsets[k], size = layerSize(bucket, k);
    for (int64_t j = begin; j < begin + size; ++j) {
      const double a = lp[j], b = shadow_[static_cast<size_t>(j)];
      diff2 += (a - b) * (a - b);
      exact2 += b * b;
      lp2 += a * a;
      dot += a * b;
    }
    if (exact2 > 0.0) {
      layer.relError = std::sqrt(diff2 / exact2);
    } else {
      layer.relError = diff2 > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
    }
    if (exact2 == 0.0 && lp2 == 0.0) {
      layer.cosine = 1.0;
    } else if (exact2 == 0.0 || lp2 == 0.0) {
      layer.cosine = 0.0;
    } else {
      layer.cosine = std::clamp(dot / std::sqrt(lp2 * exact2), -1.0, 1.0);
    }
    for (size_t r = 0; r < world; ++r) {
      const int64_t* at = all.data() + (r * layers + k) * kCountsPerLayer;
      layer.in += precision::QuantizationCounts::unpack(at);
      layer.out += precision::QuantizationCounts::unpack(at + kPacked);
    }
    record_->layers[static_cast<size_t>(bucket.params[k])] = layer;
  }
  shadow_ = {};
  in_ = {};
  out_ = {};
}

std::optional<ProbeRecord> FidelityProbe::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<ProbeRecord> out = std::move(record_);
  record_.reset();
  return out;
}

}  // namespace aps::comm
