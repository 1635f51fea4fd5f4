#include "comm/BucketHooks.h"

#include "comm/NonFinite.h"
#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/HybridPolicy.h"
#include "precision/cuda/DeviceCodec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace aps::comm {

int64_t layerSize(const BucketLayout::Bucket& bucket, size_t k) {
  const int64_t end = k + 1 < bucket.params.size() ? bucket.offsets[k + 1] : bucket.count;
  return end - bucket.offsets[k];
}

namespace {
size_t paramOf(const BucketLayout::Bucket& bucket, size_t k) { return static_cast<size_t>(bucket.params[k]); }

precision::LayerGradient layerOf(const BucketContext& context, size_t local, size_t k) {
  const BucketLayout::Bucket& bucket = *context.layout;
  return {context.data[local] + bucket.offsets[k], layerSize(bucket, k)};
}

// Each local rank's largest |value| bits of each layer of a bucket on a GPU ([local * layers + k]),
// measured there and read back.
std::vector<uint32_t> deviceLayerMaxima(const BucketContext& context) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const size_t layers = bucket.params.size();
  std::vector<precision::cuda::DeviceRange> ranges;
  for (float* d : context.data)
    for (size_t k = 0; k < layers; ++k) ranges.push_back({d + bucket.offsets[k], layerSize(bucket, k)});
  return precision::cuda::absMaxBitsOf(ranges, context.device.index);
}

template <typename T>
const T* forFormat(const std::vector<T>& perFormat, const BucketLayout::Bucket& bucket) {
  const auto f = static_cast<size_t>(bucket.format);
  return f < perFormat.size() ? &perFormat[f] : nullptr;
}
}  // namespace

std::vector<std::pair<size_t, precision::QuantizationCounts>> measurePerLayerOnDevice(
    const BucketLayout::Bucket& bucket, int64_t begin, int64_t n, const float* values, const float* decoded,
    float maxValue, int device) {
  std::vector<size_t> layers;
  std::vector<precision::cuda::ShiftedRange> ranges;
  forEachLayerPiece(bucket, begin, n, [&](size_t k, int64_t at, int64_t length) {
    layers.push_back(k);
    ranges.push_back({values + at, length, 0, decoded + at});
  });
  const std::vector<precision::QuantizationCounts> counts =
      precision::cuda::quantizationCountsOf(ranges, {}, precision::RoundingMode::NearestEven, maxValue, device);
  std::vector<std::pair<size_t, precision::QuantizationCounts>> out;
  for (size_t j = 0; j < layers.size(); ++j) out.emplace_back(layers[j], counts[j]);
  return out;
}

void ParamScales::reset(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  shifts_.at(param) = 0;
  factors_.at(param) = 1.0f;
}
void ParamScales::setShift(size_t param, int shift) {
  std::lock_guard<std::mutex> lock(mutex_);
  shifts_.at(param) = shift;
}
void ParamScales::setFactor(size_t param, float factor) {
  std::lock_guard<std::mutex> lock(mutex_);
  factors_.at(param) = factor;
}
int ParamScales::shift(size_t param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shifts_.at(param);
}
float ParamScales::factor(size_t param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return factors_.at(param);
}

ErrorFeedbackState::ErrorFeedbackState(size_t params, int localRanks) {
  APS_CHECK(localRanks >= 1, "error feedback: {} local ranks", localRanks);
  for (int i = 0; i < localRanks; ++i) perRank.push_back(precision::ErrorFeedback::empty(params));
  onDevice.resize(static_cast<size_t>(localRanks));
  for (auto& r : onDevice) r.resize(params);
}

float* ErrorFeedbackState::deviceResidual(size_t i, size_t param, int64_t n, int device, bool create) {
  std::unique_ptr<cuda::DeviceScratch>& slot = onDevice.at(i).at(param);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (slot && slot->bytes() == bytes) return static_cast<float*>(slot->data());
  const std::vector<float>& host = perRank.at(i).residual(param);
  if (host.empty() && !create) return nullptr;
  APS_CHECK(host.empty() || host.size() == static_cast<size_t>(n),
            "error feedback: local rank {} holds {} residual values of parameter {}, its layer {}", i, host.size(),
            param, n);
  slot = std::make_unique<cuda::DeviceScratch>(bytes, device);
  if (!host.empty()) {
    cuda::copySync(slot->data(), host.data(), bytes, cuda::CopyKind::HostToDevice);
    perRank[i].setResidual(param, {});
  }
  return static_cast<float*>(slot->data());
}

std::vector<float> ErrorFeedbackState::residual(size_t i, size_t param) const {
  const std::unique_ptr<cuda::DeviceScratch>& slot = onDevice.at(i).at(param);
  if (!slot) return perRank.at(i).residual(param);
  std::vector<float> values(slot->bytes() / sizeof(float));
  cuda::copySync(values.data(), slot->data(), slot->bytes(), cuda::CopyKind::DeviceToHost);
  return values;
}

void ErrorFeedbackState::setResidual(size_t i, size_t param, std::vector<float> values) {
  onDevice.at(i).at(param).reset();
  perRank.at(i).setResidual(param, std::move(values));
}

void ErrorFeedbackCompensate::beforeReduce(const BucketContext& context, ParamScales& /*scales*/) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto f = static_cast<size_t>(bucket.format);
  if (f >= enabled_.size() || !enabled_[f]) return;
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (size_t i = 0; i < context.data.size(); ++i) {
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      float* layer = context.data[i] + bucket.offsets[k];
      if (!context.device.isCuda()) {
        state_->perRank[i].compensate(paramOf(bucket, k), layer);
        continue;
      }
      const int64_t n = layerSize(bucket, k);
      if (const float* r = state_->deviceResidual(i, paramOf(bucket, k), n, context.device.index, false))
        precision::cuda::addInto(layer, r, n, cuda::currentStream());
    }
  }
}

bool ErrorFeedbackCompensate::changesValues(const BucketContext& context) const {
  const auto f = static_cast<size_t>(context.layout->format);
  return f < enabled_.size() && enabled_[f];
}

bool ApsHook::changesValues(const BucketContext& context) const {
  const auto* scalerPtr = forFormat(perFormat_, *context.layout);
  return scalerPtr != nullptr && *scalerPtr && (*scalerPtr)->mode() != precision::ScalingMode::None;
}

void ApsHook::beforeReduce(const BucketContext& context, ParamScales& scales) {
  if (!changesValues(context)) return;
  const BucketLayout::Bucket& bucket = *context.layout;
  const precision::ApsScaler& scaler = **forFormat(perFormat_, bucket);
  const std::span<float* const> data = context.data;
  const size_t layers = bucket.params.size();
  // Every local rank's exponents; the MAX over ranks is taken by the callback, which folds in
  // the other local ranks (simulated ranks) and then the remote ones. From the largest values
  // markReady measured as it copied the gradients, else read here: each rank reads only its
  // own buffer, so simulated ranks find theirs on all threads.
  std::vector<std::vector<float>> localExponents(data.size());
  std::vector<uint32_t> deviceMaxima;  // on a GPU, where not measured: each layer's, read back
  std::span<const uint32_t> maxAbsBits = context.maxAbsBits;
  if (context.device.isCuda() && maxAbsBits.size() != data.size() * layers) {
    deviceMaxima = deviceLayerMaxima(context);
    maxAbsBits = deviceMaxima;
  }
  const bool measured = maxAbsBits.size() == data.size() * layers;
  parallelForRethrowing(static_cast<int64_t>(data.size()), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) {
      if (measured) {
        localExponents[i] = scaler.exponentsOfMaxBits(maxAbsBits.subspan(i * layers, layers));
        continue;
      }
      std::vector<precision::LayerGradient> g;
      for (size_t k = 0; k < layers; ++k) g.push_back(layerOf(context, i, k));
      localExponents[i] = scaler.localExponents(g);
    }
  });
  const auto reduceMax = [&](float* values, int64_t n) {
    std::vector<std::vector<float>> perLocal(data.size(), std::vector<float>(static_cast<size_t>(n)));
    std::vector<float*> pointers;
    for (size_t i = 0; i < data.size(); ++i) {
      if (static_cast<size_t>(n) == layers) {
        perLocal[i] = localExponents[i];
      } else {  // global mode: one value, the max over this rank's layers
        APS_ASSERT(n == 1);
        perLocal[i][0] = *std::max_element(localExponents[i].begin(), localExponents[i].end());
      }
      pointers.push_back(perLocal[i].data());
    }
    smallAllReduce(context.agreementTransport(), pointers, n, ReduceOp::Max);
    std::copy(perLocal[0].begin(), perLocal[0].end(), values);
  };
  const auto shifts = scaler.shiftsOfExponents(localExponents[0], reduceMax);
  for (size_t k = 0; k < layers; ++k) scales.setShift(paramOf(bucket, k), shifts.shift[k]);
  std::vector<InputShift> layerShifts;
  for (size_t k = 0; k < layers; ++k)
    if (shifts.shift[k] != 0) layerShifts.push_back({bucket.offsets[k], layerSize(bucket, k), shifts.shift[k]});
  if (context.inputs == nullptr) {  // nowhere to leave them: every rank's buffer scaled now
    applyInputShifts(data, layerShifts, context.device);
    return;
  }
  // Every rank's every value was read for its exponent (inf or NaN gives +inf), and agreed on:
  // the reduction need not look for them again. A shift of a finite layer stays finite (its
  // largest value lands below the format's maximum), a non-finite layer is not shifted.
  context.inputs->nonFinite = shifts.anyNonFinite;
  context.inputs->shifts.insert(context.inputs->shifts.end(), layerShifts.begin(), layerShifts.end());
}

void ApsHook::afterReduce(const BucketContext& context, ParamScales& scales) {
  const BucketLayout::Bucket& bucket = *context.layout;
  std::vector<InputShift> undo;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const int s = scales.shift(paramOf(bucket, k));
    if (s != 0) undo.push_back({bucket.offsets[k], layerSize(bucket, k), -s});
  }
  applyInputShifts(context.data, undo, context.device);
}

Fp8LmHook::Fp8LmHook(std::vector<std::shared_ptr<precision::Fp8LmScaler>> perFormat, int localRanks)
    : perFormat_(std::move(perFormat)),
      saturated_(perFormat_.size(), std::vector<float>(static_cast<size_t>(localRanks), 0.0f)),
      seen_(perFormat_.size(), 0),
      reducedSaturated_(perFormat_.size(), 0),
      reducedNonFinite_(perFormat_.size(), 0) {}

bool Fp8LmHook::changesValues(const BucketContext& context) const {
  const auto* scalerPtr = forFormat(perFormat_, *context.layout);
  return scalerPtr != nullptr && *scalerPtr;
}

void Fp8LmHook::beforeReduce(const BucketContext& context, ParamScales& scales) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto* scalerPtr = forFormat(perFormat_, bucket);
  if (scalerPtr == nullptr || !*scalerPtr) return;
  const precision::Fp8LmScaler& scaler = **scalerPtr;
  const std::span<float* const> data = context.data;
  const size_t layers = bucket.params.size();
  // One MAX agreement per bucket: -mu (all ranks use the smallest mu; it is the same
  // everywhere unless a rank resumed differently) and, per tensor, the absolute maximum over
  // all ranks (NaN counts as infinity, which a MAX would otherwise drop).
  const size_t agreed = scaler.perTensor() ? 1 + layers : 1;
  const bool onDevice = context.device.isCuda();
  std::vector<uint32_t> deviceMaxima;  // on a GPU: each rank's layers' largest |value| bits, read back
  if (onDevice && agreed > 1) deviceMaxima = deviceLayerMaxima(context);
  std::vector<std::vector<float>> perLocal(data.size(), std::vector<float>(agreed, 0.0f));
  std::vector<float*> pointers;
  for (size_t i = 0; i < data.size(); ++i) {
    perLocal[i][0] = -static_cast<float>(scaler.state().mu);
    for (size_t k = 0; k + 1 < agreed; ++k) {
      float amax = 0.0f;
      if (onDevice) {  // the same maximum: NaN's bits lie above inf's
        const uint32_t bits = deviceMaxima[i * layers + k];
        amax = bits > precision::kernels::kMaxFiniteBits ? std::numeric_limits<float>::infinity()
                                                         : std::bit_cast<float>(bits);
      } else {
        const auto layer = layerOf(context, i, k);
        for (int64_t j = 0; j < layer.size; ++j) {
          const float a = std::fabs(layer.data[j]);
          amax = std::isnan(a) ? std::numeric_limits<float>::infinity() : std::max(amax, a);
        }
      }
      perLocal[i][1 + k] = amax;
    }
    pointers.push_back(perLocal[i].data());
  }
  smallAllReduce(context.agreementTransport(), pointers, static_cast<int64_t>(agreed), ReduceOp::Max);
  const std::vector<float>& max = perLocal[0];
  const double mu = -static_cast<double>(max[0]);
  for (size_t k = 0; k < layers; ++k) {
    const float factor = scaler.factor(mu, agreed > 1 ? max[1 + k] : 0.0f);
    scales.setFactor(paramOf(bucket, k), factor);
    for (float* d : data) {
      if (onDevice) {
        precision::cuda::multiplyBy(d + bucket.offsets[k], layerSize(bucket, k), factor, cuda::currentStream());
        continue;
      }
      const std::span<float> layer(d + bucket.offsets[k], static_cast<size_t>(layerSize(bucket, k)));
      for (float& v : layer) v *= factor;
    }
  }
  std::vector<float> saturated(data.size(), 0.0f);
  if (onDevice) {
    std::vector<precision::cuda::DeviceRange> ranges;
    for (float* d : data) ranges.push_back({d, bucket.count});
    const std::vector<float> limits(data.size(), scaler.saturationLimit());
    const std::vector<int64_t> counts = precision::cuda::countsNotBelowOf(ranges, limits, context.device.index);
    for (size_t i = 0; i < data.size(); ++i) saturated[i] = static_cast<float>(counts[i]);
  } else {
    for (size_t i = 0; i < data.size(); ++i)
      saturated[i] = static_cast<float>(scaler.countSaturated(data[i], bucket.count));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto f = static_cast<size_t>(bucket.format);
  for (size_t i = 0; i < data.size(); ++i) saturated_[f][i] += saturated[i];
  seen_[f] += bucket.count;
}

void Fp8LmHook::afterReduce(const BucketContext& context, ParamScales& scales) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto* scalerPtr = forFormat(perFormat_, bucket);
  if (scalerPtr == nullptr || !*scalerPtr) return;
  // The reduced sum is the same on every rank: its saturated values count once.
  int64_t saturated = 0;
  bool nonFinite = false;
  if (context.device.isCuda()) {
    const precision::cuda::DeviceRange sum{context.data[0], bucket.count};
    const std::vector<precision::cuda::DeviceRange> ranges{sum, sum};
    const std::vector<float> limits{(*scalerPtr)->saturationLimit(), std::numeric_limits<float>::infinity()};
    const std::vector<int64_t> counts = precision::cuda::countsNotBelowOf(ranges, limits, context.device.index);
    saturated = counts[0];
    nonFinite = counts[1] > 0;
  } else {
    saturated = (*scalerPtr)->countSaturated(context.data[0], bucket.count);
    nonFinite = hasNonFinite(context.data[0], bucket.count);
  }
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const float factor = scales.factor(paramOf(bucket, k));
    for (float* d : context.data) {
      if (context.device.isCuda()) {
        precision::cuda::divideBy(d + bucket.offsets[k], layerSize(bucket, k), factor, cuda::currentStream());
        continue;
      }
      const std::span<float> layer(d + bucket.offsets[k], static_cast<size_t>(layerSize(bucket, k)));
      for (float& v : layer) v /= factor;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  reducedSaturated_[static_cast<size_t>(bucket.format)] += saturated;
  if (nonFinite) reducedNonFinite_[static_cast<size_t>(bucket.format)] = 1;
}

void Fp8LmHook::finishStep(Transport& transport) {
  for (size_t f = 0; f < perFormat_.size(); ++f) {
    const auto& scaler = perFormat_[f];
    if (!scaler || seen_[f] == 0) continue;
    std::vector<float*> pointers;
    for (float& v : saturated_[f]) pointers.push_back(&v);
    smallAllReduce(transport, pointers, 1, ReduceOp::Sum);
    const auto world = static_cast<int64_t>(transport.worldSize());
    // The reduced sums are the same on every rank, so every rank sees the same overflow.
    scaler->update(static_cast<int64_t>(saturated_[f][0]) + reducedSaturated_[f], seen_[f] * (world + 1),
                   reducedNonFinite_[f] != 0);
    std::fill(saturated_[f].begin(), saturated_[f].end(), 0.0f);
    seen_[f] = 0;
    reducedSaturated_[f] = 0;
    reducedNonFinite_[f] = 0;
  }
}

void StatisticsHook::setQuantizers(std::vector<std::shared_ptr<const precision::Quantizer>> perFormat,
                                   std::vector<precision::RoundingMode> rounding) {
  quantizers_ = std::move(perFormat);
  rounding_ = std::move(rounding);
}

bool StatisticsHook::usesBuffersBefore(const BucketContext& context) const {
  const auto* quantizer = forFormat(quantizers_, *context.layout);
  return quantizer != nullptr && *quantizer;
}

void StatisticsHook::beforeReduce(const BucketContext& context, ParamScales& /*scales*/) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto* quantizer = forFormat(quantizers_, bucket);
  if (quantizer == nullptr || !*quantizer) return;
  const auto rounding = rounding_.at(static_cast<size_t>(bucket.format));
  // Local rank 0's scaled gradient: scalings left for the reduction applied to a copy.
  const std::span<const InputShift> pending =
      context.inputs != nullptr ? std::span<const InputShift>(context.inputs->shifts) : std::span<const InputShift>();
  const float maxValue = (*quantizer)->format().maxValue();
  if (context.device.isCuda()) {  // measured there, each layer read scaled, the counts read back
    std::vector<precision::cuda::ShiftedRange> ranges;
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const auto layer = layerOf(context, 0, k);
      ranges.push_back({layer.data, layer.size, uniformShift(pending, bucket.offsets[k], layer.size)});
    }
    const std::vector<precision::QuantizationCounts> counts =
        precision::cuda::quantizationCountsOf(ranges, (*quantizer)->params(), rounding, maxValue, context.device.index);
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t k = 0; k < counts.size(); ++k) stats_.record(paramOf(bucket, k), counts[k]);
    return;
  }
  // Layers split over the threads (each layer's counts are its own; the communication thread
  // would otherwise measure the whole bucket alone while the reduction waits).
  parallelFor(static_cast<int64_t>(bucket.params.size()), 1, [&](int64_t k0, int64_t k1) {
    std::vector<float> q, shifted;
    for (auto k = static_cast<size_t>(k0); k < static_cast<size_t>(k1); ++k) {
      const auto layer = layerOf(context, 0, k);
      q.resize(static_cast<size_t>(layer.size));
      if (!pending.empty()) shifted.resize(static_cast<size_t>(layer.size));
      const float* values = shiftedInputs(pending, bucket.offsets[k], layer.size, layer.data, shifted.data());
      (*quantizer)->quantize(values, q.data(), layer.size, rounding);
      const auto counts = precision::QuantizationCounts::measure(values, q.data(), layer.size, maxValue);
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.record(paramOf(bucket, k), counts);
    }
  });
}

precision::QuantizationCounts StatisticsHook::window(size_t param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.window(param);
}

std::vector<size_t> StatisticsHook::adapt(precision::HybridPolicy& policy) {
  std::lock_guard<std::mutex> lock(mutex_);
  return policy.adapt(stats_);
}

void StatisticsHook::reset(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset(param);
  outStats_.reset(param);
}

NamedTensors StatisticsHook::stateDict() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {{"statistics", int64Tensor(stats_.serialize())}, {"statistics_out", int64Tensor(outStats_.serialize())}};
}

void StatisticsHook::loadStateDict(const NamedTensors& state) {
  const std::vector<int64_t> windows = int64Entry(state, "statistics");
  const bool hasOutput = findTensor(state, "statistics_out") != nullptr;
  const std::vector<int64_t> output = hasOutput ? int64Entry(state, "statistics_out") : std::vector<int64_t>();
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.restore(windows);
  if (hasOutput) outStats_.restore(output);
}

EncodeObserver* StatisticsHook::observerFor(const BucketContext& context) {
  const auto* quantizer = forFormat(quantizers_, *context.layout);
  if (quantizer == nullptr || !*quantizer) return nullptr;
  observed_ = context.layout;
  observedMax_ = (*quantizer)->format().maxValue();
  observedDevice_ = context.device;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int p : context.layout->params) touched_[static_cast<size_t>(p)] = 1;
  return this;
}

void StatisticsHook::encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) {
  if (site != Site::Sum || observed_ == nullptr) return;
  const BucketLayout::Bucket& bucket = *observed_;
  std::lock_guard<std::mutex> lock(mutex_);
  measurePerLayer(bucket, begin, n, values, decoded, observedMax_, observedDevice_,
                  [&](size_t k, const precision::QuantizationCounts& c) { stepOut_[paramOf(bucket, k)] += c; });
}

void StatisticsHook::finishStep(Transport& transport) {
  // The parameters whose re-encoded sums were observed this step: the same on every rank (every
  // rank reduces the same buckets), so every rank joins the all-gather or none does.
  std::vector<size_t> params;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t p = 0; p < touched_.size(); ++p) {
      if (touched_[p]) params.push_back(p);
    }
  }
  observed_ = nullptr;
  if (params.empty()) return;
  // This process's counts travel as its first local rank's share (integers: the sum does not
  // depend on how ranks are spread over processes).
  constexpr size_t kFields = precision::QuantizationCounts::kPacked;
  const size_t count = params.size();
  std::vector<std::vector<int64_t>> mine(static_cast<size_t>(transport.localRankCount()),
                                         std::vector<int64_t>(count * kFields, 0));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t k = 0; k < count; ++k) {
      precision::QuantizationCounts& c = stepOut_[params[k]];
      c.pack(mine[0].data() + k * kFields);
      c = {};
      touched_[params[k]] = 0;
    }
  }
  std::vector<const void*> pointers;
  for (const auto& m : mine) pointers.push_back(m.data());
  const auto world = static_cast<size_t>(transport.worldSize());
  std::vector<int64_t> all(world * count * kFields);
  allGatherBytes(transport, pointers, count * kFields * sizeof(int64_t), all.data());
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t k = 0; k < count; ++k) {
    precision::QuantizationCounts sum;
    for (size_t r = 0; r < world; ++r)
      sum += precision::QuantizationCounts::unpack(all.data() + (r * count + k) * kFields);
    if (sum.total > 0) outStats_.record(params[k], sum);
  }
}

precision::QuantizationCounts StatisticsHook::outputWindow(size_t param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return outStats_.window(param);
}

bool ErrorFeedbackCapture::readsValues(const BucketContext& context) const {
  const auto* quantizer = forFormat(quantizers_, *context.layout);
  return quantizer != nullptr && *quantizer;
}

void ErrorFeedbackCapture::beforeReduce(const BucketContext& context, ParamScales& scales) {
  const BucketLayout::Bucket& bucket = *context.layout;
  const auto* quantizer = forFormat(quantizers_, bucket);
  if (quantizer == nullptr || !*quantizer) return;
  const auto rounding = rounding_.at(static_cast<size_t>(bucket.format));
  std::vector<float> q;
  for (size_t i = 0; i < context.data.size(); ++i) {
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const auto layer = layerOf(context, i, k);
      const size_t param = paramOf(bucket, k);
      if (context.device.isCuda()) {  // the residual made where it lives, in one pass
        std::lock_guard<std::mutex> lock(state_->mutex);
        float* r = state_->deviceResidual(i, param, layer.size, context.device.index, true);
        precision::cuda::feedbackResidual((*quantizer)->params(), rounding, layer.data, layer.size, {},
                                          scales.shift(param), scales.factor(param), r, cuda::currentStream());
        continue;
      }
      q.resize(static_cast<size_t>(layer.size));
      (*quantizer)->quantize(layer.data, q.data(), layer.size, rounding);
      // residual = intended - sent, back in gradient units (exact power-of-two unscaling).
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->perRank[i].update(param, layer.data, q.data(), layer.size, scales.shift(param), scales.factor(param));
    }
  }
}

NamedTensors ErrorFeedbackCapture::stateDict() const {
  if (std::none_of(quantizers_.begin(), quantizers_.end(), [](const auto& q) { return q != nullptr; })) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  const size_t params = state_->perRank.at(0).layers();
  std::vector<int64_t> sizes;
  for (size_t p = 0; p < params; ++p) sizes.push_back(static_cast<int64_t>(state_->residual(0, p).size()));
  NamedTensors out{{"residual_sizes", int64Tensor(sizes)}};
  for (size_t i = 0; i < state_->perRank.size(); ++i) {
    std::vector<float> flat;
    for (size_t p = 0; p < sizes.size(); ++p) {
      const std::vector<float> r = state_->residual(i, p);
      APS_CHECK(r.size() == static_cast<size_t>(sizes[p]),
                "error feedback: local rank {} holds {} residual values of parameter {}, local rank 0 {}", i, r.size(),
                p, sizes[p]);
      flat.insert(flat.end(), r.begin(), r.end());
    }
    out.push_back({fmt::format("residual.{}", i),
                   Tensor::fromVector(std::span<const float>(flat), {static_cast<int64_t>(flat.size())})});
  }
  return out;
}

void ErrorFeedbackCapture::loadStateDict(const NamedTensors& state) {
  if (findTensor(state, "residual_sizes") == nullptr) return;
  const std::vector<int64_t> sizes = int64Entry(state, "residual_sizes");
  std::lock_guard<std::mutex> lock(state_->mutex);
  APS_CHECK(sizes.size() == state_->perRank.at(0).layers(), "'residual_sizes' gives {} parameters, the model has {}",
            sizes.size(), state_->perRank.at(0).layers());
  int64_t total = 0;
  for (int64_t n : sizes) {
    APS_CHECK(n >= 0, "'residual_sizes' holds a negative size {}", n);
    total += n;
  }
  for (size_t i = 0; i < state_->perRank.size(); ++i) {
    const std::string name = fmt::format("residual.{}", i);
    const Tensor* t = findTensor(state, name);
    APS_CHECK(t != nullptr, "no '{}' (written with fewer ranks?)", name);
    APS_CHECK(t->dtype() == DType::Float32 && t->numel() == total, "'{}' holds {} {} values, {} float32 expected", name,
              t->numel(), dtypeName(t->dtype()), total);
    const Tensor values = t->contiguous();
    const float* at = values.data<float>();
    for (size_t p = 0; p < sizes.size(); ++p) {
      state_->setResidual(i, p, std::vector<float>(at, at + sizes[p]));
      at += sizes[p];
    }
  }
}

}  // namespace aps::comm
