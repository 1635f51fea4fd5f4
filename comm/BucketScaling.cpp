#include "comm/BucketScaling.h"

#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <algorithm>
#include <limits>

namespace aps::comm {

namespace {

// Host copies of a GPU bucket's buffers, for a hook that uses them on the host
// (BucketHook::runsOnDevice): its context, with the copies as they are now, and writeBack.
class HostCopy {
 public:
  explicit HostCopy(const BucketContext& context) : device_(context) {
    const auto n = static_cast<size_t>(context.layout->count);
    values_.resize(context.data.size());
    for (size_t i = 0; i < values_.size(); ++i) {
      values_[i].resize(n);
      cuda::copySync(values_[i].data(), context.data[i], n * sizeof(float), cuda::CopyKind::DeviceToHost);
      pointers_.push_back(values_[i].data());
    }
    host_ = context;
    host_.data = pointers_;
    host_.device = Device::cpu();
  }
  const BucketContext& context() const { return host_; }
  void writeBack() const {
    for (size_t i = 0; i < values_.size(); ++i)
      cuda::copySync(device_.data[i], values_[i].data(), values_[i].size() * sizeof(float),
                     cuda::CopyKind::HostToDevice);
  }

 private:
  const BucketContext& device_;
  BucketContext host_;
  std::vector<std::vector<float>> values_;
  std::vector<float*> pointers_;
};

}  // namespace

BucketScaling::FormatScaling BucketScaling::FormatScaling::forSpec(const precision::CodecSpec& spec,
                                                                   precision::ScalingMode mode, int worldSize,
                                                                   bool errorFeedback, bool perTensor) {
  FormatScaling fs;
  if (spec.kind != precision::CodecSpec::Kind::Float || spec.format.isFp32()) return fs;
  fs.format = spec.format;
  fs.rounding = spec.rounding;
  fs.errorFeedback = errorFeedback;
  if (mode == precision::ScalingMode::Fp8Lm) {
    precision::Fp8LmScaler::Options options;
    options.perTensor = perTensor;
    fs.autoscaler = std::make_shared<precision::Fp8LmScaler>(spec.format, worldSize, options);
  } else if (mode != precision::ScalingMode::None) {
    fs.scaler = std::make_shared<precision::ApsScaler>(spec.format, worldSize, mode);
  }
  return fs;
}

BucketScaling::BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow, int localRanks,
                             int64_t probeInterval)
    : localRanks_(localRanks),
      scales_(paramCount),
      feedback_(std::make_shared<ErrorFeedbackState>(paramCount, localRanks)),
      statistics_(std::make_shared<StatisticsHook>(paramCount, statsWindow)),
      probe_(probeInterval > 0 ? std::make_shared<FidelityProbe>(paramCount, probeInterval) : nullptr) {
  APS_CHECK(localRanks >= 1, "bucket scaling: {} local ranks", localRanks);
  setFormats(std::move(perFormat));
}

void BucketScaling::setFormats(std::vector<FormatScaling> perFormat) {
  std::vector<std::shared_ptr<const precision::Quantizer>> quantizers, feedbackQuantizers;
  std::vector<precision::RoundingMode> rounding;
  std::vector<bool> feedback;
  std::vector<std::shared_ptr<const precision::ApsScaler>> aps;
  std::vector<std::shared_ptr<precision::Fp8LmScaler>> fp8lm;
  std::vector<float> maxValues;  // the probe's saturation threshold per format
  touchesFormat_.clear();
  readsFirstRankOnly_.clear();
  for (const auto& f : perFormat) {
    touchesFormat_.push_back(f.format || f.errorFeedback || f.scaler || f.autoscaler ? 1 : 0);
    readsFirstRankOnly_.push_back(
        f.scaler && f.scaler->mode() != precision::ScalingMode::None && !f.errorFeedback && !f.autoscaler ? 1 : 0);
    maxValues.push_back(f.format ? f.format->maxValue() : std::numeric_limits<float>::infinity());
    APS_CHECK(!f.errorFeedback || f.format, "bucket scaling: error feedback needs a float wire format");
    auto quantizer = f.format ? std::make_shared<const precision::Quantizer>(*f.format) : nullptr;
    quantizers.push_back(f.statistics ? quantizer : nullptr);
    feedbackQuantizers.push_back(f.errorFeedback ? quantizer : nullptr);
    rounding.push_back(f.rounding);
    feedback.push_back(f.errorFeedback);
    aps.push_back(f.scaler);
    fp8lm.push_back(f.autoscaler);
  }
  statistics_->setQuantizers(quantizers, rounding);
  chain_ = {std::make_shared<ErrorFeedbackCompensate>(feedback_, feedback), std::make_shared<ApsHook>(aps),
            std::make_shared<Fp8LmHook>(fp8lm, localRanks_), statistics_,
            std::make_shared<ErrorFeedbackCapture>(feedback_, feedbackQuantizers, rounding)};
  if (probe_) {
    probe_->setMaxValues(std::move(maxValues));
    if (!probeAtWorldLevel_) chain_.insert(chain_.begin(), probe_);
  }
}

bool BucketScaling::readsInputs(int format) const {
  return probe_ != nullptr || format < 0 || static_cast<size_t>(format) >= touchesFormat_.size() ||
         touchesFormat_[static_cast<size_t>(format)] != 0;
}

// APS says whether any input is NaN or infinite and scales through the reduction; the
// statistics read local rank 0's values alone. A probe reads every rank's.
bool BucketScaling::readsFirstRankOnly(int format) const {
  return probe_ == nullptr && format >= 0 && static_cast<size_t>(format) < readsFirstRankOnly_.size() &&
         readsFirstRankOnly_[static_cast<size_t>(format)] != 0;
}

bool BucketScaling::Observers::observes(Site site) const {
  return std::any_of(targets.begin(), targets.end(), [site](const EncodeObserver* t) { return t->observes(site); });
}

void BucketScaling::Observers::encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) {
  bool copied = false;
  for (EncodeObserver* t : targets) {
    if (!t->observes(site)) continue;
    if (!onDevice || t->readsDeviceMemory()) {
      t->encoded(site, begin, n, values, decoded);
      continue;
    }
    if (!copied) {  // once for all targets that read the host
      const auto count = static_cast<size_t>(n);
      hostValues_.resize(count);
      hostDecoded_.resize(count);
      cuda::copySync(hostValues_.data(), values, count * sizeof(float), cuda::CopyKind::DeviceToHost);
      cuda::copySync(hostDecoded_.data(), decoded, count * sizeof(float), cuda::CopyKind::DeviceToHost);
      copied = true;
    }
    t->encoded(site, begin, n, hostValues_.data(), hostDecoded_.data());
  }
}

EncodeObserver* BucketScaling::encodeObserver(const BucketContext& context) {
  observers_.targets.clear();
  if (probe_) {
    if (EncodeObserver* o = probe_->observerFor(context)) observers_.targets.push_back(o);
  }
  if (leaderProbe_) {
    if (EncodeObserver* o = leaderProbe_->leaderObserverFor(context)) observers_.targets.push_back(o);
  }
  if (EncodeObserver* o = statistics_->observerFor(context)) observers_.targets.push_back(o);
  if (observers_.targets.empty()) return nullptr;
  observers_.onDevice = context.device.isCuda();
  return observers_.targets.size() == 1 ? observers_.targets[0] : &observers_;
}

void BucketScaling::installWorldLevel(ReducerOptions& options, BucketScaling& leaders) {
  if (!probe_) return;
  probeAtWorldLevel_ = true;
  chain_.erase(std::remove(chain_.begin(), chain_.end(), probe_), chain_.end());
  leaders.leaderProbe_ = probe_;
  options.worldHook = &worldProbe_;
}

void BucketScaling::beforeReduce(const BucketContext& context) {
  // Nothing scaled yet this step (a layer may have changed format since the last one).
  for (int p : context.layout->params) scales_.reset(static_cast<size_t>(p));
  BucketContext c = context;
  for (const auto& hook : chain_) {
    // Scalings left for the reduction are applied before a hook that reads the values.
    if (c.inputs != nullptr && !c.inputs->shifts.empty() && hook->readsValues(c)) {
      applyInputShifts(c.data, c.inputs->shifts, c.device);
      c.inputs->shifts.clear();
    }
    runHook(*hook, c, true);
    if (hook->changesValues(c)) c.maxAbsBits = {};  // measured of values that have changed
  }
}

void BucketScaling::afterReduce(const BucketContext& context) {
  // Reverse order (no std::views::reverse: clang 14 cannot compile libstdc++ 12's ranges).
  for (auto hook = chain_.rbegin(); hook != chain_.rend(); ++hook) runHook(**hook, context, false);
}

void BucketScaling::runHook(BucketHook& hook, const BucketContext& context, bool before) {
  const bool hostCopy = context.device.isCuda() && !hook.runsOnDevice() &&
                        (before ? hook.usesBuffersBefore(context) : hook.usesBuffersAfter(context));
  if (!hostCopy) {
    if (before) {
      hook.beforeReduce(context, scales_);
    } else {
      hook.afterReduce(context, scales_);
    }
    return;
  }
  const HostCopy copy(context);
  if (before) {
    hook.beforeReduce(copy.context(), scales_);
    if (hook.changesValues(context)) copy.writeBack();
  } else {
    hook.afterReduce(copy.context(), scales_);
    copy.writeBack();
  }
}

void BucketScaling::finishStep(Transport& transport) {
  for (const auto& hook : chain_) hook->finishStep(transport);
}

std::vector<size_t> BucketScaling::adapt(precision::HybridPolicy& policy) { return statistics_->adapt(policy); }

void BucketScaling::resetStatistics(int param) { statistics_->reset(static_cast<size_t>(param)); }

std::optional<ProbeRecord> BucketScaling::takeProbe() {
  if (!probe_) return std::nullopt;
  return probe_->take();
}

NamedTensors BucketScaling::stateDict() const {
  NamedTensors out;
  for (const auto& hook : chain_) {
    for (auto& entry : hook->stateDict()) out.push_back(std::move(entry));
  }
  return out;
}

void BucketScaling::loadStateDict(const NamedTensors& state) {
  for (const auto& hook : chain_) hook->loadStateDict(state);
}

std::vector<float> BucketScaling::residual(int localRank, int param) const {
  std::lock_guard<std::mutex> lock(feedback_->mutex);
  return feedback_->residual(static_cast<size_t>(localRank), static_cast<size_t>(param));
}

int BucketScaling::lastShift(int param) const { return scales_.shift(static_cast<size_t>(param)); }

precision::QuantizationCounts BucketScaling::statistics(int param) const {
  return statistics_->window(static_cast<size_t>(param));
}

precision::QuantizationCounts BucketScaling::outputStatistics(int param) const {
  return statistics_->outputWindow(static_cast<size_t>(param));
}

}  // namespace aps::comm
