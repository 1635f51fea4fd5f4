#include "comm/FidelityProbe.h"

#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/cuda/DeviceCodec.h"
#include "precision/kernels/Quantization.h"

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
  device_ = context.device;
  if (context.device.isCuda()) {  // copies in device memory, summed over the bucket's own transport
    if (!deviceShadow_ || deviceShadowOn_ != context.device) {
      AllReduceOptions options;
      options.kind = AllReduceKind::Native;
      options.checkFinite = false;
      options.device = context.device;
      deviceShadow_ = makeAllReduce(options, nullptr);
      deviceShadowOn_ = context.device;
    }
    std::vector<std::unique_ptr<cuda::DeviceScratch>> copies;
    std::vector<float*> pointers;
    for (float* d : context.data) {
      copies.push_back(std::make_unique<cuda::DeviceScratch>(n * sizeof(float), context.device.index));
      cuda::copyAsync(copies.back()->data(), d, n * sizeof(float), cuda::CopyKind::DeviceToDevice,
                      cuda::currentStream());
      pointers.push_back(static_cast<float*>(copies.back()->data()));
    }
    deviceShadow_->run(*context.transport, pointers, bucket.count);
    deviceSum_ = std::move(copies[0]);
  } else {
    std::vector<std::vector<float>> copies;
    std::vector<float*> pointers;
    for (float* d : context.data) copies.emplace_back(d, d + n);
    for (auto& c : copies) pointers.push_back(c.data());
    shadowAlgorithm_->run(context.agreementTransport(), pointers, bucket.count);
    shadow_ = std::move(copies[0]);
  }
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
  measurePerLayer(*bucket_, begin, n, values, decoded, maxValue_, device_,
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

  // Per layer, the low-precision sum (every scaling undone) against the exact one.
  std::vector<precision::kernels::CompareSums> sums(layers);
  if (device_.isCuda()) {
    const auto* exact = static_cast<const float*>(deviceSum_->data());
    std::vector<precision::cuda::ComparedRange> ranges;
    for (size_t k = 0; k < layers; ++k)
      ranges.push_back({context.data[0] + bucket.offsets[k], exact + bucket.offsets[k], layerSize(bucket, k)});
    sums = precision::cuda::compareSumsOf(ranges, device_.index);
  } else {
    for (size_t k = 0; k < layers; ++k) {
      const float* lp = context.data[0] + bucket.offsets[k];
      const float* exact = shadow_.data() + bucket.offsets[k];
      const int64_t size = layerSize(bucket, k);
      for (int64_t c = 0; c < precision::kernels::chunksOf(size); ++c)
        precision::kernels::addSums(sums[k], precision::kernels::compareChunk(lp, exact, size, c));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!record_ || record_->step != context.step) {
    record_ = ProbeRecord{context.step, std::vector<ProbeLayer>(params_)};
  }
  for (size_t k = 0; k < layers; ++k) {
    ProbeLayer layer;
    layer.probed = true;
    const double diff2 = sums[k].diff2, exact2 = sums[k].exact2, lp2 = sums[k].lp2, dot = sums[k].dot;
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
    // A sum that held inf or NaN: NaN figures, one NaN whatever the device made of the sums.
    if (std::isnan(layer.relError)) layer.relError = std::numeric_limits<double>::quiet_NaN();
    if (std::isnan(layer.cosine)) layer.cosine = std::numeric_limits<double>::quiet_NaN();
    for (size_t r = 0; r < world; ++r) {
      const int64_t* at = all.data() + (r * layers + k) * kCountsPerLayer;
      layer.in += precision::QuantizationCounts::unpack(at);
      layer.out += precision::QuantizationCounts::unpack(at + kPacked);
    }
    record_->layers[static_cast<size_t>(bucket.params[k])] = layer;
  }
  shadow_ = {};
  deviceSum_.reset();
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
