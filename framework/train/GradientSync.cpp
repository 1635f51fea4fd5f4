#include "framework/train/GradientSync.h"

#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketScaling.h"
#include "comm/Communicator.h"
#include "comm/SmallAllReduce.h"
#include "framework/autograd/Function.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/train/EvalMetrics.h"
#include "precision/ApsScaler.h"
#include "precision/Fp8LmScaler.h"
#include "precision/HybridPolicy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

namespace aps::train {

GradientSync::GradientSync(const TrainConfig& config, NamedTensors params, Ranks ranks, MetricsSink metrics,
                           std::vector<NamedTensors> copies)
    : config_(config),
      params_(std::move(params)),
      copies_(std::move(copies)),
      ranks_(ranks),
      metrics_(std::move(metrics)),
      currentLocal_(copies_.size() + 1, 0),
      holding_(copies_.size() + 1, 0) {
  for (const NamedTensors& copy : copies_) {
    APS_CHECK(copy.size() == params_.size(), "gradient sync: a model copy has {} parameters, the model {}", copy.size(),
              params_.size());
  }
  resolveFormats();
  widenings_.assign(params_.size(), 0);
  buildReducer(0);
}

GradientSync::~GradientSync() = default;

// Every parameter's format: the first matching hybrid rule, else precision.format. With
// hybrid_auto, the policy starts from these and widens layers as their statistics ask.
void GradientSync::resolveFormats() {
  const auto& p = config_.precision;
  std::vector<precision::CodecSpec> ruleSpecs;
  for (const auto& rule : p.hybrid) ruleSpecs.push_back(rule.format.spec);
  precision::CodecSpec defaultSpec = p.format.spec;
  const bool blocks = p.scaling == precision::ScalingMode::Block;
  if (blocks) {  // the scale is the codec's: every float format gets its per-block scales
    defaultSpec = defaultSpec.withBlocks(p.blockSize);
    for (auto& spec : ruleSpecs) spec = spec.withBlocks(p.blockSize);
  }
  for (const auto& param : params_) {
    precision::CodecSpec spec = defaultSpec;
    for (size_t r = 0; r < p.hybrid.size(); ++r) {
      if (precision::HybridPolicy::globMatch(p.hybrid[r].pattern, param.name)) {
        spec = ruleSpecs[r];
        break;
      }
    }
    paramSpecs_.push_back(spec);
  }
  const bool floatOnly = std::all_of(paramSpecs_.begin(), paramSpecs_.end(), [](const precision::CodecSpec& c) {
    return c.kind == precision::CodecSpec::Kind::Float;
  });
  const bool fp8lm = p.scaling == precision::ScalingMode::Fp8Lm;
  APS_CHECK(floatOnly || (!p.errorFeedback && !fp8lm && !p.hybridAuto),
            "{}: precision.error_feedback, scaling = autoscale and hybrid_auto need float wire formats without "
            "block scales (not Dettmers' types, MX types or scaling = block)",
            config_.sourceFile);
  const bool blockScaled = std::any_of(paramSpecs_.begin(), paramSpecs_.end(), [](const precision::CodecSpec& c) {
    return c.kind == precision::CodecSpec::Kind::BlockScaled;
  });
  APS_CHECK(!blockScaled || blocks || p.scaling == precision::ScalingMode::None,
            "{}: precision.scaling = '{}' does not apply to block-scaled formats (MX types, 'e4m3/block32'), which "
            "carry their own scales; use scaling: none or block",
            config_.sourceFile, precision::scalingModeName(p.scaling));
  if (!p.hybridAuto) return;
  std::vector<precision::HybridPolicy::Rule> rules;  // each parameter resolved above: one rule per name
  for (size_t i = 0; i < params_.size(); ++i) rules.push_back({params_[i].name, paramSpecs_[i].format});
  precision::HybridPolicy::AutoWiden widen{true, p.hybridUnderflow, p.hybridSaturation};
  policy_ = std::make_unique<precision::HybridPolicy>(defaultSpec.format, std::move(rules), widen);
  std::vector<std::string> names;
  for (const auto& param : params_) names.push_back(param.name);
  policy_->assign(names);
}

// One parameter of one model copy: its gradient, once backward has it, goes to the reducer as
// the gradient of the local rank that copy computes.
class GradientSync::ToReducer : public autograd::LeafHook {
 public:
  ToReducer(GradientSync& sync, int param, size_t copy, BeforeReady beforeReady)
      : sync_(sync), param_(param), copy_(copy), beforeReady_(std::move(beforeReady)) {}

  void ready(Tensor& leaf) override {
    if (sync_.holding_[copy_]) return;
    const int local = sync_.currentLocal_[copy_];
    if (beforeReady_) beforeReady_(param_, local, leaf);
    sync_.reducer_->markReady(param_, local);
  }

  // Without a hook that must see .grad first, the reducer takes a simulated rank's gradient
  // (other than local rank 0's) as backward hands it over: no write to .grad and read back (a
  // pass over the model's gradient per simulated rank and step). The reducer reads host
  // memory: a gradient elsewhere goes through .grad.
  bool takeFirst(const Tensor& g) override {
    return !beforeReady_ && !sync_.holding_[copy_] && g.device().isCpu() &&
           sync_.reducer_->markReadyFrom(param_, sync_.currentLocal_[copy_], static_cast<const float*>(g.rawData()));
  }

 private:
  GradientSync& sync_;
  int param_;
  size_t copy_;
  BeforeReady beforeReady_;
};

void GradientSync::attach(BeforeReady beforeReady) {
  for (size_t c = 0; c <= copies_.size(); ++c) {
    NamedTensors& params = paramsOfCopy(c);
    for (size_t i = 0; i < params.size(); ++i)
      autograd::addLeafHook(params[i].tensor, std::make_shared<ToReducer>(*this, static_cast<int>(i), c, beforeReady));
  }
}

// (Re)builds the wire formats, the scaling hooks and the bucket reducer from paramSpecs_: at
// start-up, and whenever hybrid precision widens a layer (buckets group by format).
// comm.algorithm: hierarchical is two_shot within groups of comm.group_size ranks, then across
// the groups' leaders, each level with its own hooks (docs/ALGORITHMS.md, Hierarchical APS);
// the other names are one flat algorithm.
void GradientSync::buildReducer(uint64_t step) {
  groupParamsByFormat();
  const bool hierarchical = config_.comm.algorithm == CommAlgorithm::Hierarchical;
  const int group = hierarchical ? static_cast<int>(config_.comm.groupSize) : 0;
  APS_CHECK(!hierarchical || (group >= 1 && group <= ranks_.world && ranks_.world % group == 0),
            "{}: 'comm.group_size' = {} must divide the world size {} (comm.algorithm: hierarchical)",
            config_.sourceFile, config_.comm.groupSize, ranks_.world);
  comm::AllReduceOptions reduceOptions;
  // The flat algorithms are comm's by the same names; hierarchical runs two_shot at each level.
  reduceOptions.kind = hierarchical ? comm::AllReduceKind::TwoShot
                                    : *comm::kAllReduceKindNames.find(commAlgorithmName(config_.comm.algorithm));
  reduceOptions.kahan = config_.precision.kahan;
  // Gradients reduced between GPUs: on the device where they lie.
  if (ranks_.gradients != nullptr && !params_.empty()) reduceOptions.device = params_.front().tensor.device();
  std::vector<std::shared_ptr<const comm::AllReduceAlgorithm>> algorithms;
  std::vector<comm::BucketScaling::FormatScaling> perFormat, leaderFormat;
  for (size_t f = 0; f < specs_.size(); ++f) {
    algorithms.push_back(comm::makeAllReduce(reduceOptions, precision::makeCodec(specs_[f])));
    perFormat.push_back(scalingOf(f, hierarchical ? group : ranks_.world));
    if (!hierarchical) continue;
    leaderFormat.push_back(scalingOf(f, ranks_.world / group));
    // No quantisation statistics: the group level runs once per group in a simulated world
    // but once per process under mpi, so windows would differ (hybrid_auto is refused).
    perFormat.back().statistics = false;
    leaderFormat.back().statistics = false;
  }
  reducer_.reset();  // its communication thread ends before the hooks change
  setScalingFormats(perFormat, hierarchical ? &leaderFormat : nullptr);
  comm::ReducerOptions options = reducerOptions();
  if (hierarchical) {
    options.groupSize = group;
    leaderScaling_->installLeaderLevel(options);
    scaling_->installWorldLevel(options, *leaderScaling_);
  }
  if (ranks_.gradients != nullptr) options.agreements = ranks_.transport;
  reducer_ =
      std::make_unique<comm::GradientReducer>(ranks_.gradients != nullptr ? *ranks_.gradients : *ranks_.transport,
                                              localRankGradients(), algorithms, formatOf_, options);
  reducer_->setStep(step);
  logFormats();
  int sticky = 0;
  for (size_t b = 0; b < reducer_->layout().buckets().size(); ++b)
    sticky += reducer_->keepsSticky16(static_cast<int>(b));
  if (sticky > 0) {
    spdlog::info("simulated ranks keep their gradients as 16-bit keys that round as their values ({} of {} buckets)",
                 sticky, reducer_->layout().buckets().size());
  }
}

// One wire format per distinct codec of paramSpecs_, in order of first use: specs_,
// codecNames_, and each parameter's format index formatOf_.
void GradientSync::groupParamsByFormat() {
  specs_.clear();
  codecNames_.clear();
  formatOf_.clear();
  for (const auto& spec : paramSpecs_) {
    const std::string name = precision::makeCodec(spec)->name();
    auto at = std::find(codecNames_.begin(), codecNames_.end(), name);
    if (at == codecNames_.end()) {
      codecNames_.push_back(name);
      specs_.push_back(spec);
      at = codecNames_.end() - 1;
    }
    formatOf_.push_back(static_cast<int>(at - codecNames_.begin()));
  }
}

// The scaling hooks of every format, kept across rebuilds (their state: mu, residuals,
// statistics); the leader level's too under hierarchical.
void GradientSync::setScalingFormats(const std::vector<comm::BucketScaling::FormatScaling>& perFormat,
                                     const std::vector<comm::BucketScaling::FormatScaling>* leaderFormat) {
  const auto& p = config_.precision;
  if (!scaling_) {
    scaling_ = std::make_shared<comm::BucketScaling>(perFormat, params_.size(), static_cast<int>(p.statsWindow),
                                                     ranks_.localRanks, p.probeInterval);
  } else {
    scaling_->setFormats(perFormat);
  }
  if (leaderFormat == nullptr) return;
  if (!leaderScaling_) {
    leaderScaling_ = std::make_shared<comm::BucketScaling>(*leaderFormat, params_.size(),
                                                           static_cast<int>(p.statsWindow), ranks_.localRanks);
  } else {
    leaderScaling_->setFormats(*leaderFormat);
  }
}

// The reducer's options from the config, with the flat level's hooks installed.
comm::ReducerOptions GradientSync::reducerOptions() const {
  comm::ReducerOptions options;
  options.bucketCapBytes = static_cast<size_t>(config_.comm.bucketMb * 1024 * 1024);
  options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
  options.overlap = config_.comm.overlap;
  options.average = true;
  options.preDivide = config_.precision.preDivide;
  options.seed = config_.seed;
  scaling_->install(options);
  return options;
}

// Local rank l's gradients are those of the model copy that computes it (l mod copies).
std::vector<std::vector<comm::NamedGradient>> GradientSync::localRankGradients() {
  std::vector<std::vector<comm::NamedGradient>> grads(static_cast<size_t>(ranks_.localRanks));
  for (size_t l = 0; l < grads.size(); ++l) {
    const size_t c = l % (copies_.size() + 1);
    for (const auto& param : paramsOfCopy(c)) grads[l].push_back({param.name, param.tensor.grad().buffer()});
  }
  return grads;
}

// The scaling hooks of wire format f: APS (or global) shift, FP8-LM's autoscale and error
// feedback for float formats narrower than fp32; nothing for fp32 and Dettmers' types.
comm::BucketScaling::FormatScaling GradientSync::scalingOf(size_t f, int ranks) {
  const auto& p = config_.precision;
  const auto& spec = specs_[f];
  // The config's "autoscale" is fp8lm; block scales are the codec's.
  auto fs = comm::BucketScaling::FormatScaling::forSpec(spec, p.scaling, ranks, p.errorFeedback, p.autoscalePerTensor);
  if (fs.autoscaler) {  // one mu per wire format, kept when hybrid precision rebuilds the reducer
    auto& scaler = autoscalers_[codecNames_[f]];
    if (!scaler) scaler = fs.autoscaler;
    fs.autoscaler = scaler;
  }
  if (fs.scaler && !scaling_ && fs.scaler->usableBinades() < 1.0) {
    spdlog::warn(
        "precision: {} with {} scaling at {} ranks: the headroom for {} summands keeps every scaled gradient at or "
        "below {:g} while the format's smallest positive value is {:g}, so (nearly) every gradient value will be "
        "flushed to zero and the model will not learn; use a wider format, fewer ranks, or precision.hybrid_auto "
        "(which widens such layers)",
        codecNames_[f], precision::scalingModeName(p.scaling), ranks, ranks,
        std::ldexp(1.0, fs.scaler->maxExponent()) / ranks, static_cast<double>(spec.format.minSubnormal()));
  }
  return fs;
}

// Which wire format every layer got (info under hybrid precision, debug otherwise).
void GradientSync::logFormats() const {
  const auto& p = config_.precision;
  const bool perLayer = specs_.size() > 1 || policy_;
  for (size_t i = 0; i < params_.size(); ++i) {
    spdlog::log(perLayer ? spdlog::level::info : spdlog::level::debug, "wire format of {}: {}", params_[i].name,
                codecNames_[static_cast<size_t>(formatOf_[i])]);
  }
  for (size_t f = 0; f < specs_.size(); ++f) {
    const auto count = std::count(formatOf_.begin(), formatOf_.end(), static_cast<int>(f));
    spdlog::info("wire format {}: {} parameter tensors, scaling {}{}", codecNames_[f], count,
                 precision::scalingModeName(p.scaling), p.errorFeedback ? ", error feedback" : "");
  }
  if (config_.comm.algorithm == CommAlgorithm::Hierarchical) {
    const int64_t group = config_.comm.groupSize;
    spdlog::info(
        "hierarchical reduction: {} groups of {} ranks, then their leaders (APS headroom for {} and {} "
        "summands instead of {})",
        ranks_.world / group, group, group, ranks_.world / group, ranks_.world);
  }
}

void GradientSync::setStep(uint64_t step) {
  step_ = step;
  reducer_->setStep(step);
}

comm::StepCommStats GradientSync::finishStep() {
  const comm::StepCommStats stats = reducer_->wait();
  scaling_->finishStep(*ranks_.transport);
  if (auto probe = scaling_->takeProbe()) writeProbe(*probe);
  return stats;
}

namespace {
// The median of `values` (NaN sorts last); null when empty.
nlohmann::json median(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end(), [](double a, double b) { return std::isnan(b) ? !std::isnan(a) : a < b; });
  const size_t m = values.size() / 2;
  return metricValue(values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]));
}

// flushed / nonzero and saturated / total of probe counts; null when nothing was encoded.
nlohmann::json flushedOf(const precision::QuantizationCounts& c) {
  return c.total ? nlohmann::json(c.flushedFraction()) : nlohmann::json(nullptr);
}
nlohmann::json saturatedOf(const precision::QuantizationCounts& c) {
  return c.total ? nlohmann::json(c.saturatedFraction()) : nlohmann::json(nullptr);
}
}  // namespace

// One "probe" metrics record (docs/ALGORITHMS.md, Fidelity probe); every rank computes the
// same figures, rank 0 writes them.
void GradientSync::writeProbe(const comm::ProbeRecord& record) {
  if (probeCount_.empty()) {
    probeRelError_.assign(params_.size(), 0.0);
    probeCosine_.assign(params_.size(), 0.0);
    probeCount_.assign(params_.size(), 0);
  }
  ++probeSteps_;
  nlohmann::json layers = nlohmann::json::array();
  std::vector<double> relErrors, cosines;
  bool nonFinite = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const comm::ProbeLayer& l = record.layers[i];
    if (!l.probed) continue;
    // The run's means take the finite probes; a step whose sum overflowed (an inf or NaN error,
    // usually a step the trainer then skips) is counted instead (probeSummary's nonfinite_steps).
    if (std::isfinite(l.relError) && std::isfinite(l.cosine)) {
      probeRelError_[i] += l.relError;
      probeCosine_[i] += l.cosine;
      ++probeCount_[i];
    } else {
      nonFinite = true;
    }
    relErrors.push_back(l.relError);
    cosines.push_back(l.cosine);
    layers.push_back({{"name", params_[i].name},
                      {"format", codecNames_[static_cast<size_t>(formatOf_[i])]},
                      {"rel_error", metricValue(l.relError)},
                      {"cosine", metricValue(l.cosine)},
                      {"in_flushed", flushedOf(l.in)},
                      {"in_saturated", saturatedOf(l.in)},
                      {"out_flushed", flushedOf(l.out)},
                      {"out_saturated", saturatedOf(l.out)}});
  }
  if (nonFinite) ++probeNonFiniteSteps_;
  if (metrics_) {
    metrics_({{"type", "probe"},
              {"step", record.step},
              {"median_rel_error", median(relErrors)},
              {"median_cosine", median(cosines)},
              {"layers", std::move(layers)}});
  }
}

nlohmann::json GradientSync::probeSummary() const {
  if (config_.precision.probeInterval <= 0) return nullptr;
  std::vector<double> relErrors, cosines;
  for (size_t i = 0; i < probeCount_.size(); ++i) {
    if (probeCount_[i] == 0) continue;
    relErrors.push_back(probeRelError_[i] / static_cast<double>(probeCount_[i]));
    cosines.push_back(probeCosine_[i] / static_cast<double>(probeCount_[i]));
  }
  return {{"steps", probeSteps_},
          {"nonfinite_steps", probeNonFiniteSteps_},
          {"median_rel_error", median(relErrors)},
          {"median_cosine", median(cosines)}};
}

void GradientSync::adaptFormats(int64_t step) {
  if (!policy_) return;
  const bool root = ranks_.firstRank == 0;
  std::vector<size_t> widened;
  if (root) widened = scaling_->adapt(*policy_);
  {
    // Rank 0's decisions to every process (nothing moves between simulated ranks).
    std::vector<uint8_t> flags(params_.size(), 0);
    for (size_t l : widened) flags[l] = 1;
    comm::broadcastFromRankZero(*ranks_.transport, flags.data(), flags.size());
    if (!root) {
      for (size_t l = 0; l < flags.size(); ++l) {
        if (!flags[l]) continue;
        policy_->widenLayer(l);
        widened.push_back(l);
      }
    }
  }
  if (widened.empty()) return;
  for (size_t l : widened) {
    const precision::FloatFormat before = paramSpecs_[l].format;
    paramSpecs_[l].format = policy_->formatOf(l);
    ++widenings_[l];
    // Decided after step `step` + 1 (counting from 1, as the train records do).
    spdlog::info("step {}: hybrid precision widens {} from {} to {}", step + 1, params_[l].name, before.name,
                 paramSpecs_[l].format.name);
    if (metrics_) {
      metrics_({{"type", "format"},
                {"step", step + 1},
                {"name", params_[l].name},
                {"from", before.name},
                {"to", paramSpecs_[l].format.name}});
    }
  }
  // The next step is step + 1: its stochastic rounding streams and the probe's schedule count
  // from there, as after a resume at that step (loadState).
  buildReducer(static_cast<uint64_t>(step) + 1);
}

NamedTensors GradientSync::stateDict() const {
  // The hooks' entries, error feedback's (residual_sizes, residual.<local rank>) set apart:
  // they go last, every rank's gathered.
  NamedTensors out, residuals;
  for (auto& entry : scaling_->stateDict()) (entry.name.starts_with("residual") ? residuals : out).push_back(entry);
  out.push_back({"widenings", int64Tensor(widenings_)});
  // An FP8-LM scaler's one entry, "state", as autoscale.<codec>.
  for (const auto& [name, scaler] : autoscalers_) out.push_back({"autoscale." + name, scaler->stateDict().at(0).tensor});
  if (residuals.empty()) return out;
  const std::vector<int64_t> sizes = int64Entry(residuals, "residual_sizes");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  out.push_back({"residual_sizes", *findTensor(residuals, "residual_sizes")});
  // Every rank's residuals to rank 0: one exchange round through the transport, the same
  // code for simulated and real ranks.
  std::vector<const void*> mine;
  for (int i = 0; i < ranks_.localRanks; ++i) {
    const Tensor* t = findTensor(residuals, fmt::format("residual.{}", i));
    APS_CHECK(t != nullptr && t->numel() == total, "precision state: local rank {}'s residuals are missing", i);
    mine.push_back(t->rawData());
  }
  std::vector<Tensor> gathered;
  std::vector<void*> into;
  if (ranks_.firstRank == 0) {
    for (int r = 0; r < ranks_.world; ++r) gathered.push_back(Tensor::zeros({total}));
  }
  for (auto& t : gathered) into.push_back(t.rawData());
  comm::gatherToRankZero(*ranks_.transport, mine, static_cast<size_t>(total) * sizeof(float), into);
  for (size_t r = 0; r < gathered.size(); ++r) out.push_back({fmt::format("residual.{}", r), gathered[r]});
  return out;
}

void GradientSync::loadStateDict(const NamedTensors& state) {
  const std::vector<int64_t> widened = int64Entry(state, "widenings");
  APS_CHECK(widened.size() == params_.size(), "'widenings' has {} entries for {} parameters", widened.size(),
            params_.size());
  bool rebuild = false;
  for (size_t l = 0; l < params_.size(); ++l) {
    // A layer widens at most once per rung of e3m0 -> e4m3 -> e5m2 -> bf16 -> fp32.
    APS_CHECK(widened[l] >= widenings_[l] && widened[l] <= 8, "'widenings' of {} is {}, outside [0, 8]",
              params_[l].name, widened[l]);
    for (int64_t k = widenings_[l]; k < widened[l]; ++k) {
      APS_CHECK(policy_ != nullptr, "'widenings' widened layer {} but hybrid_auto is off", params_[l].name);
      policy_->widenLayer(l);
      paramSpecs_[l].format = policy_->formatOf(l);
      rebuild = true;
    }
    widenings_[l] = widened[l];
  }
  if (rebuild) buildReducer(step_);
  // The hooks' state, with this process's residuals as local ranks' ("residual.<local rank>").
  NamedTensors hooks;
  for (const auto& entry : state) {
    if (!entry.name.starts_with("residual.")) hooks.push_back(entry);
  }
  if (findTensor(state, "residual_sizes") != nullptr) {
    const std::vector<int64_t> n = int64Entry(state, "residual_sizes");
    APS_CHECK(n.size() == params_.size(), "residuals of {} parameters, the model has {}", n.size(), params_.size());
    // A residual is empty (the layer was never quantised) or one value per gradient element.
    for (size_t i = 0; i < params_.size(); ++i) {
      APS_CHECK(n[i] == 0 || n[i] == params_[i].tensor.numel(), "'residual_sizes' gives {} {} values, it has {}",
                params_[i].name, n[i], params_[i].tensor.numel());
    }
    for (int local = 0; local < ranks_.localRanks; ++local) {
      const std::string name = fmt::format("residual.{}", ranks_.firstRank + local);
      const Tensor* t = findTensor(state, name);
      APS_CHECK(t != nullptr, "no '{}' (written by another configuration or with fewer ranks?)", name);
      hooks.push_back({fmt::format("residual.{}", local), *t});
    }
  }
  scaling_->loadStateDict(hooks);
  for (const auto& [name, scaler] : autoscalers_) {
    const Tensor* t = findTensor(state, "autoscale." + name);
    APS_CHECK(t != nullptr, "no 'autoscale.{}' (written by another configuration?)", name);
    try {
      scaler->loadStateDict({{"state", *t}});
    } catch (const Error& e) {
      APS_FAIL("'autoscale.{}': {}", name, e.what());
    }
  }
}

nlohmann::json GradientSync::formatsRecord() const {
  nlohmann::json formats = nlohmann::json::array();
  for (size_t i = 0; i < params_.size(); ++i) {
    formats.push_back({{"name", params_[i].name}, {"format", codecNames_[static_cast<size_t>(formatOf_[i])]}});
  }
  return formats;
}

nlohmann::json GradientSync::layerRecords() const {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto c = scaling_->statistics(static_cast<int>(i));
    if (c.total == 0) continue;
    // The re-encoded sums (every rank's: the two_shot owner's encode, each ring hop's); null
    // where none was measured (allgather, whose rounding of sums is not observed).
    const auto out = scaling_->outputStatistics(static_cast<int>(i));
    layers.push_back(
        {{"name", params_[i].name},
         {"shift", scaling_->lastShift(static_cast<int>(i))},
         {"flushed", c.flushedFraction()},
         {"saturated", c.saturatedFraction()},
         {"rel_error", c.relativeError()},
         {"out_flushed", out.total ? nlohmann::json(out.flushedFraction()) : nlohmann::json(nullptr)},
         {"out_saturated", out.total ? nlohmann::json(out.saturatedFraction()) : nlohmann::json(nullptr)}});
  }
  return layers;
}

nlohmann::json GradientSync::autoscaleRecord() const {
  nlohmann::json scales = nlohmann::json::object();  // FP8-LM's mu per wire format
  for (const auto& [name, scaler] : autoscalers_) scales[name] = scaler->state().mu;
  return scales;
}

}  // namespace aps::train
