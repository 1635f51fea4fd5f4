#include "framework/train/Trainer.h"

#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketScaling.h"
#include "comm/Communicator.h"
#include "comm/GradientReducer.h"
#include "comm/SimTransport.h"
#include "data/DatasetRecipes.h"
#include "data/DistributedSampler.h"
#include "data/Loader.h"
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/Function.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/core/Parallel.h"
#include "framework/nn/Dropout.h"
#include "framework/ops/Loss.h"
#include "framework/optim/AdamW.h"
#include "framework/optim/ConstantLr.h"
#include "framework/optim/CosineLr.h"
#include "framework/optim/DynamicLossScaler.h"
#include "framework/optim/Lars.h"
#include "framework/optim/LrScheduler.h"
#include "framework/optim/MultiStepLr.h"
#include "framework/optim/PolynomialLr.h"
#include "framework/optim/Sgd.h"
#include "framework/optim/StepLr.h"
#include "framework/optim/WarmupLr.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/EvalMetrics.h"
#include "framework/train/FaultInjection.h"
#include "framework/train/Restore.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"
#include "precision/ApsScaler.h"
#include "precision/CodecSpec.h"
#include "precision/Fp8LmScaler.h"
#include "precision/HybridPolicy.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <type_traits>

namespace aps::train {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The data module's recipe names for the config's dataset names.
std::string recipeName(const std::string& dataset) { return dataset == "imagefolder" ? "imagenet" : dataset; }

std::string testSplit(const std::string& dataset) {
  if (dataset == "imagefolder" || dataset == "cityscapes" || dataset == "voc") return "val";
  return "test";
}

// Per-step timings and traffic, summed over a logging interval.
struct IntervalStats {
  int64_t steps = 0, images = 0;
  double loss = 0, dataWait = 0, compute = 0, comm = 0, exposed = 0, seconds = 0;
  uint64_t bytes = 0;
};


}  // namespace

struct Trainer::State {
  TrainConfig config;
  std::shared_ptr<comm::Communicator> mpi;
  std::unique_ptr<comm::SimTransport> sim;
  comm::Transport* transport = nullptr;
  int world = 1, firstRank = 0, localRanks = 1;

  models::ModelInfo info;
  std::shared_ptr<nn::Module> model;
  NamedTensors params;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;

  std::shared_ptr<const data::Dataset> trainSet, testSet;
  std::unique_ptr<data::DistributedSampler> sampler;
  std::vector<std::unique_ptr<data::Loader>> loaders;  // one per local rank
  int64_t stepsPerEpoch = 0, totalSteps = 0;

  std::vector<nn::Dropout*> dropouts;                    // their masks depend on (step, rank) only
  autograd::ComputePrecision compute;                    // precision.compute
  std::unique_ptr<optim::DynamicLossScaler> lossScaler;  // 16-bit compute only

  std::vector<precision::CodecSpec> specs;                                     // per wire-format id
  std::vector<int> formatOf;                                                   // per parameter
  std::vector<precision::CodecSpec> paramSpecs;                                // per parameter (before ids)
  std::unique_ptr<precision::HybridPolicy> policy;                             // precision.hybrid_auto
  std::vector<int64_t> widenings;                                              // per parameter, by the automatic rule
  std::map<std::string, std::shared_ptr<precision::Fp8LmScaler>> autoscalers;  // per codec name
  std::shared_ptr<comm::BucketScaling> scaling;
  std::unique_ptr<comm::GradientReducer> reducer;
  int currentLocal = 0;

  int64_t epoch = 0, batchInEpoch = 0, globalStep = 0, skipped = 0;
  bool trainLossNonFinite = false;  // some step's training loss was inf or NaN: the run diverged
  std::ofstream metrics;
  const FaultInjection faults = FaultInjection::fromEnvironment();  // tests only; empty otherwise

  bool isRoot() const { return firstRank == 0; }

  void setupWorld(std::shared_ptr<comm::Communicator> communicator);
  void checkSameConfig();
  void setupModel();
  void setupData();
  void setupOptimizer();
  void setupPrecisionAndComm();
  void buildReducer();
  void adaptFormats();
  void savePrecisionState(Checkpoint& c);
  void restorePrecisionState(const Checkpoint& c, const std::string& path);
  RunIdentity identity() const;
  void restore(const std::string& path);
  void claimCheckpointDir(bool resuming, bool deleteOld);
  void checkOutputsWritable() const;
  void checkMemory() const;
  void save();
  void trainEpoch();
  bool trainStep(std::vector<data::Batch>& batches, IntervalStats& interval);
  TrainSummary evaluate();
  void logInterval(IntervalStats& interval);
  void showProgress(double stepSeconds);
  void report(const TrainSummary& summary, const char* type);
  void writeMetrics(const nlohmann::json& line);
  void broadcastBuffersFromRankZero();
  template <typename T>
  std::vector<T> sumOverProcesses(const std::vector<T>& local);
};

void Trainer::State::setupWorld(std::shared_ptr<comm::Communicator> communicator) {
  if (config.comm.backend == "sim") {
    sim = std::make_unique<comm::SimTransport>(static_cast<int>(config.comm.worldSize));
    transport = sim.get();
  } else {
    APS_CHECK(communicator != nullptr, "comm.backend is mpi but no MPI communicator was given");
    mpi = std::move(communicator);
    transport = mpi.get();
  }
  world = transport->worldSize();
  firstRank = transport->firstLocalRank();
  localRanks = transport->localRankCount();
  int threads = static_cast<int>(config.threads);
  if (threads == 0 && mpi && world > 1) threads = 1;  // oversubscribed ranks: one thread each
  if (threads > 0) setNumThreads(threads);
  initLogging(firstRank, config.logging.allRanks, parseLogLevel(config.logging.level));
}

void Trainer::State::checkSameConfig() {
  if (!mpi || world == 1) return;
  const uint64_t hash = configHash(config);
  std::vector<uint64_t> all(static_cast<size_t>(world));
  mpi->allGather(&hash, sizeof(hash), all.data());
  for (int r = 0; r < world; ++r) {
    APS_CHECK(all[static_cast<size_t>(r)] == all[0],
              "rank {} runs a different configuration than rank 0 (config hash {:016x} vs {:016x}); every rank "
              "must load the same config and --set overrides",
              r, all[static_cast<size_t>(r)], all[0]);
  }
}

void Trainer::State::setupModel() {
  info = models::modelInfo(config.model.name);
  model = models::createModel(config.model.name, {config.model.numClasses, config.model.inChannels, config.seed});
  params = model->namedParameters();
  // Gradients exist from the start, so backward accumulates in place and the reducer's
  // buffer views stay valid for the whole run.
  for (auto& p : params) p.tensor.setGrad(Tensor::zeros(p.tensor.sizes()));
  for (auto& [name, module] : model->namedModules()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(module)) dropouts.push_back(d);
  }
}

void Trainer::State::setupData() {
  const auto& d = config.data;
  data::DatasetSpec train{recipeName(d.dataset), d.path, "train", d.augment, 0, config.seed, 0};
  data::DatasetSpec test{recipeName(d.dataset), d.path, testSplit(d.dataset), false, 0, config.seed + 1, 0};
  trainSet = data::makeDataset(train);
  testSet = data::makeDataset(test);
  APS_CHECK(trainSet->numClasses() == config.model.numClasses, "model.num_classes = {} but dataset '{}' has {} classes",
            config.model.numClasses, d.dataset, trainSet->numClasses());
  const auto shape = trainSet->sampleShape();
  APS_CHECK(shape.image.at(0) == config.model.inChannels, "model.in_channels = {} but dataset '{}' has {} channels",
            config.model.inChannels, d.dataset, shape.image.at(0));
  APS_CHECK(info.segmentation == !shape.label.empty(), "model '{}' is a {} model but dataset '{}' is for {}", info.name,
            info.segmentation ? "segmentation" : "classification", d.dataset,
            shape.label.empty() ? "classification" : "segmentation");
  checkMemory();  // before the per-rank sampler, loaders and buffers are allocated
  int64_t size = trainSet->size();
  if (d.trainSamples > 0) size = std::min(size, d.trainSamples);
  sampler = std::make_unique<data::DistributedSampler>(size, world, firstRank, true, config.seed, true);
  stepsPerEpoch = sampler->numSamples() / d.batchSize;
  APS_CHECK(stepsPerEpoch > 0,
            "data.batch_size = {} is larger than a rank's shard ({} samples of {} over {} ranks): no full batch",
            d.batchSize, sampler->numSamples(), size, world);
  totalSteps = config.maxSteps > 0 ? config.maxSteps : config.epochs * stepsPerEpoch;
  // Simulated ranks share the process's cores: one loader thread each is plenty.
  const int workers = localRanks > 1 ? std::min<int>(1, static_cast<int>(d.workers)) : static_cast<int>(d.workers);
  for (int i = 0; i < localRanks; ++i) {
    data::LoaderOptions options{d.batchSize, localRanks > 8 ? 0 : workers, static_cast<int>(d.prefetch), true,
                                config.seed};
    loaders.push_back(std::make_unique<data::Loader>(trainSet, options));
  }
}

void Trainer::State::setupOptimizer() {
  const auto& o = config.optimizer;
  const int64_t globalBatch = config.data.batchSize * world;
  const double lr = o.lr * (config.schedule.scaleWithBatch
                                ? static_cast<double>(globalBatch) / static_cast<double>(config.schedule.baseBatch)
                                : 1.0);
  if (o.name == "sgd" || o.name == "nesterov") {
    optim::SgdOptions s;
    s.lr = lr;
    s.momentum = o.momentum;
    s.nesterov = o.name == "nesterov";
    s.weightDecay = o.weightDecay;
    s.excludeBiasAndNormFromDecay = o.excludeBiasAndNorm;
    optimizer = std::make_unique<optim::Sgd>(params, s);
  } else if (o.name == "lars") {
    optim::LarsOptions s;
    s.lr = lr;
    s.momentum = o.momentum;
    s.weightDecay = o.weightDecay;
    s.trustCoefficient = o.larsTrust;
    s.excludeBiasAndNorm = o.excludeBiasAndNorm;
    optimizer = std::make_unique<optim::Lars>(params, s);
  } else {
    optim::AdamWOptions s;
    s.lr = lr;
    s.beta1 = o.beta1;
    s.beta2 = o.beta2;
    s.eps = o.eps;
    s.weightDecay = o.weightDecay;
    s.excludeBiasAndNormFromDecay = o.excludeBiasAndNorm;
    optimizer = std::make_unique<optim::AdamW>(params, s);
  }
  const auto& s = config.schedule;
  const int64_t spe = stepsPerEpoch;
  std::shared_ptr<const optim::LrSchedule> schedule;
  if (s.name == "constant") {
    schedule = std::make_shared<optim::ConstantLr>(lr);
  } else if (s.name == "step") {
    schedule = std::make_shared<optim::StepLr>(lr, s.stepEpochs * spe, s.gamma);
  } else if (s.name == "multistep") {
    std::vector<int64_t> steps;
    for (int64_t m : s.milestones) steps.push_back(m * spe);
    schedule = std::make_shared<optim::MultiStepLr>(lr, steps, s.gamma);
  } else if (s.name == "cosine") {
    schedule = std::make_shared<optim::CosineLr>(lr, totalSteps, s.minLr);
  } else {
    schedule = std::make_shared<optim::PolynomialLr>(lr, totalSteps, s.power, s.minLr);
  }
  const auto warmup = static_cast<int64_t>(std::llround(s.warmupEpochs * static_cast<double>(spe)));
  if (warmup > 0) schedule = std::make_shared<optim::WarmupLr>(schedule, warmup, s.warmupStartLr);
  scheduler = std::make_unique<optim::LrScheduler>(schedule, *optimizer);
}

void Trainer::State::setupPrecisionAndComm() {
  const auto& p = config.precision;
  compute = autograd::ComputePrecision::parse(p.compute);
  if (!compute.isFp32()) {
    // 16-bit compute (autograd/ComputePrecision.h): loss scaling keeps small gradients above
    // the format's underflow; pure modes store weights and optimizer state in 16 bits.
    if (p.lossScaling != "none") {
      optim::DynamicLossScaler::Options o;
      o.initialScale = p.lossScale;
      if (p.lossScaling == "static") o.growthFactor = o.backoffFactor = 1.0;
      o.minScale = std::min(o.minScale, o.initialScale);
      o.maxScale = std::max(o.maxScale, o.initialScale);
      lossScaler = std::make_unique<optim::DynamicLossScaler>(o);
    }
    if (compute.isPure()) optimizer->setStorageFormat(compute.format(), p.stochasticUpdate, config.seed);
  }

  const auto rounding = precision::parseRoundingMode(p.rounding);
  auto specOf = [&](const YAML::Node& node) {
    precision::CodecSpec spec = precision::CodecSpec::fromYaml(node);
    // The config's rounding applies unless the format names its own ("e4m3:stochastic",
    // {format: ..., rounding: ...}).
    const bool ownRounding = node.IsScalar() ? node.Scalar().find(':') != std::string::npos : bool(node["rounding"]);
    if (spec.kind == precision::CodecSpec::Kind::Float && !ownRounding) {
      spec.rounding = rounding;
    }
    return spec;
  };
  std::vector<precision::CodecSpec> ruleSpecs;
  for (const auto& rule : p.hybrid) ruleSpecs.push_back(specOf(rule.format));
  const precision::CodecSpec defaultSpec = specOf(p.format);
  // Every parameter's format: the first matching rule, else the default.
  for (const auto& param : params) {
    precision::CodecSpec spec = defaultSpec;
    for (size_t r = 0; r < p.hybrid.size(); ++r) {
      if (precision::HybridPolicy::globMatch(p.hybrid[r].pattern, param.name)) {
        spec = ruleSpecs[r];
        break;
      }
    }
    paramSpecs.push_back(spec);
  }
  const bool floatOnly = std::all_of(paramSpecs.begin(), paramSpecs.end(), [](const precision::CodecSpec& c) {
    return c.kind == precision::CodecSpec::Kind::Float;
  });
  APS_CHECK(floatOnly || (!p.errorFeedback && p.scaling != "autoscale" && !p.hybridAuto),
            "{}: precision.error_feedback, scaling = autoscale and hybrid_auto need float wire formats (not "
            "Dettmers' types)",
            config.sourceFile);
  if (p.hybridAuto) {
    std::vector<precision::HybridPolicy::Rule> rules;  // each parameter resolved above: one rule per name
    for (size_t i = 0; i < params.size(); ++i) rules.push_back({params[i].name, paramSpecs[i].format});
    precision::HybridPolicy::AutoWiden widen{true, p.hybridUnderflow, p.hybridSaturation};
    policy = std::make_unique<precision::HybridPolicy>(defaultSpec.format, std::move(rules), widen);
    std::vector<std::string> names;
    for (const auto& param : params) names.push_back(param.name);
    policy->assign(names);
  }
  widenings.assign(params.size(), 0);
  buildReducer();
  for (size_t i = 0; i < params.size(); ++i) {
    autograd::addGradReadyHook(params[i].tensor, [this, i](Tensor& leaf) {
      faults.poisonGradient(firstRank + currentLocal, globalStep, static_cast<int64_t>(i), leaf);
      reducer->markReady(static_cast<int>(i), currentLocal);
    });
  }
}

// (Re)builds the wire formats, the scaling hooks and the bucket reducer from paramSpecs: at
// start-up, and whenever hybrid precision widens a layer (buckets group by format).
void Trainer::State::buildReducer() {
  const auto& p = config.precision;
  specs.clear();
  formatOf.clear();
  std::vector<std::string> codecNames;
  for (const auto& spec : paramSpecs) {
    const std::string name = precision::makeCodec(spec)->name();
    auto at = std::find(codecNames.begin(), codecNames.end(), name);
    if (at == codecNames.end()) {
      codecNames.push_back(name);
      specs.push_back(spec);
      at = codecNames.end() - 1;
    }
    formatOf.push_back(static_cast<int>(at - codecNames.begin()));
  }
  const auto mode = p.scaling == "autoscale" ? precision::ScalingMode::None : precision::parseScalingMode(p.scaling);
  comm::AllReduceOptions reduceOptions;
  reduceOptions.kind = comm::parseAllReduceKind(config.comm.algorithm);
  reduceOptions.kahan = p.kahan;
  std::vector<std::shared_ptr<const comm::AllReduceAlgorithm>> algorithms;
  std::vector<comm::BucketScaling::FormatScaling> perFormat;
  for (size_t f = 0; f < specs.size(); ++f) {
    const auto& spec = specs[f];
    std::shared_ptr<const precision::Codec> codec = precision::makeCodec(spec);
    algorithms.push_back(comm::makeAllReduce(reduceOptions, codec));
    comm::BucketScaling::FormatScaling fs;
    if (spec.kind == precision::CodecSpec::Kind::Float && !spec.format.isFp32()) {
      fs.format = spec.format;
      fs.rounding = spec.rounding;
      fs.errorFeedback = p.errorFeedback;
      if (p.scaling == "autoscale") {
        auto& scaler = autoscalers[codecNames[f]];
        if (!scaler) scaler = std::make_shared<precision::Fp8LmScaler>(spec.format, world);
        fs.autoscaler = scaler;
      } else if (mode != precision::ScalingMode::None) {
        fs.scaler = std::make_shared<precision::ApsScaler>(spec.format, world, mode);
        if (!scaling && fs.scaler->usableBinades() < 1.0) {
          spdlog::warn(
              "precision: {} with {} scaling at {} ranks: the headroom for {} summands keeps every scaled "
              "gradient at or below {:g} while the format's smallest positive value is {:g}, "
              "so (nearly) every gradient value will be flushed to zero and the model will not learn; use a "
              "wider format, fewer ranks, or precision.hybrid_auto (which widens such layers)",
              codecNames[f], p.scaling, world, world, std::ldexp(1.0, fs.scaler->maxExponent()) / world,
              static_cast<double>(spec.format.minSubnormal()));
        }
      }
    }
    perFormat.push_back(fs);
  }
  reducer.reset();  // its communication thread ends before the hooks change
  if (!scaling) {
    scaling =
        std::make_shared<comm::BucketScaling>(perFormat, params.size(), static_cast<int>(p.statsWindow), localRanks);
  } else {
    scaling->setFormats(perFormat);
  }
  std::vector<std::vector<comm::NamedGradient>> grads(static_cast<size_t>(localRanks));
  for (auto& g : grads) {
    for (const auto& param : params) g.push_back({param.name, param.tensor.grad().buffer()});
  }
  comm::ReducerOptions options;
  options.bucketCapBytes = static_cast<size_t>(config.comm.bucketMb * 1024 * 1024);
  options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
  options.overlap = config.comm.overlap;
  options.average = true;
  options.seed = config.seed;
  scaling->install(options);
  reducer = std::make_unique<comm::GradientReducer>(*transport, std::move(grads), algorithms, formatOf, options);
  reducer->setStep(static_cast<uint64_t>(globalStep));
  const bool perLayer = specs.size() > 1 || policy;  // hybrid precision: say what each layer got
  for (size_t i = 0; i < params.size(); ++i) {
    spdlog::log(perLayer ? spdlog::level::info : spdlog::level::debug, "wire format of {}: {}", params[i].name,
                codecNames[static_cast<size_t>(formatOf[i])]);
  }
  for (size_t f = 0; f < specs.size(); ++f) {
    int64_t count = 0;
    for (int id : formatOf) count += id == static_cast<int>(f) ? 1 : 0;
    spdlog::info("wire format {}: {} parameter tensors, scaling {}{}", codecNames[f], count, p.scaling,
                 p.errorFeedback ? ", error feedback" : "");
  }
}

// Hybrid precision's automatic rule (precision/HybridPolicy.h) on rank 0's statistics; every
// rank applies rank 0's decisions, so formats (and buckets) stay the same everywhere.
void Trainer::State::adaptFormats() {
  if (!policy) return;
  std::vector<size_t> widened;
  if (isRoot()) widened = scaling->adapt(*policy);
  if (mpi && world > 1) {
    std::vector<uint8_t> flags(params.size(), 0);
    for (size_t l : widened) flags[l] = 1;
    mpi->broadcast(flags.data(), flags.size(), 0);
    if (!isRoot()) {
      for (size_t l = 0; l < flags.size(); ++l) {
        if (!flags[l]) continue;
        policy->widenLayer(l);
        widened.push_back(l);
      }
    }
  }
  if (widened.empty()) return;
  for (size_t l : widened) {
    const precision::FloatFormat before = paramSpecs[l].format;
    paramSpecs[l].format = policy->formatOf(l);
    ++widenings[l];
    // Decided after step globalStep + 1 (counting from 1, as the train records do).
    spdlog::info("step {}: hybrid precision widens {} from {} to {}", globalStep + 1, params[l].name, before.name,
                 paramSpecs[l].format.name);
    writeMetrics({{"type", "format"},
                  {"step", globalStep + 1},
                  {"name", params[l].name},
                  {"from", before.name},
                  {"to", paramSpecs[l].format.name}});
  }
  buildReducer();
}

void Trainer::State::writeMetrics(const nlohmann::json& line) {
  if (metrics.is_open()) metrics << line.dump() << "\n" << std::flush;
}

// Element-wise sums over the processes, in rank order, the same on every rank (int64 counts
// are checked against overflow).
template <typename T>
std::vector<T> Trainer::State::sumOverProcesses(const std::vector<T>& local) {
  if (!mpi || world == 1) return local;
  std::vector<T> all(local.size() * static_cast<size_t>(world));
  mpi->allGather(local.data(), local.size() * sizeof(T), all.data());
  std::vector<T> sum(local.size(), T{0});
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < local.size(); ++i) {
      const T v = all[static_cast<size_t>(r) * local.size() + i];
      if constexpr (std::is_same_v<T, int64_t>) {
        sum[i] = addCount(sum[i], v, "evaluation counts over ranks");
      } else {
        sum[i] += v;
      }
    }
  }
  return sum;
}

// Batch-norm running statistics are buffers, not parameters: like PyTorch DDP
// (broadcast_buffers), every rank uses rank 0's after each step.
void Trainer::State::broadcastBuffersFromRankZero() {
  if (!mpi || world == 1) return;
  for (auto& b : model->namedBuffers()) mpi->broadcast(b.tensor.rawData(), b.tensor.buffer().bytes(), 0);
}

bool Trainer::State::trainStep(std::vector<data::Batch>& batches, IntervalStats& interval) {
  const auto start = Clock::now();
  faults.beforeStep(firstRank, localRanks, globalStep);
  double lossSum = 0;
  NamedTensors rankZeroBuffers;
  for (int local = 0; local < localRanks; ++local) {
    const data::Batch& batch = batches[static_cast<size_t>(local)];
    currentLocal = local;
    // Dropout masks depend on (step, rank) only: the same under sim and mpi, and on resume.
    for (nn::Dropout* d : dropouts) d->setNextStream(static_cast<uint64_t>(globalStep * world + firstRank + local));
    const Tensor images = Tensor::fromVector(std::span<const float>(batch.images), batch.imageShape);
    const Tensor labels = Tensor::fromVector(std::span<const int64_t>(batch.labels), batch.labelShape);
    autograd::ComputePrecisionGuard precisionGuard(compute);
    const Tensor logits = model->forward(images);
    const Tensor loss = ops::crossEntropy(logits, labels, {0.0f, info.segmentation ? 255 : -100});
    lossSum += loss.item();
    // Gradient-ready hooks hand each (loss-scaled) gradient to the reducer.
    autograd::backward(loss, lossScaler ? lossScaler->rootGradient() : Tensor());
    if (local + 1 < localRanks) model->zeroGrad();
    if (local == 0 && localRanks > 1) {
      for (const auto& b : model->namedBuffers()) rankZeroBuffers.push_back({b.name, b.tensor.clone()});
    }
  }
  // Simulated ranks share one model: keep rank 0's batch-norm statistics, as mpi does.
  if (localRanks > 1) {
    auto buffers = model->namedBuffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].tensor.copyFrom(rankZeroBuffers[i].tensor);
  }
  const double computeSeconds = secondsSince(start);
  const comm::StepCommStats comm = reducer->wait();  // the reduced, averaged gradients are in place
  scaling->finishStep(*transport);                   // FP8-LM autoscale: mu for the next step

  double loss = lossSum / localRanks;
  if (mpi && world > 1) {
    float l = static_cast<float>(loss);
    mpi->allReduce(&l, 1, comm::ReduceOp::Sum);
    loss = l / world;
  }
  if (!std::isfinite(loss)) trainLossNonFinite = true;
  bool finite = !comm.nonFinite;
  if (lossScaler) {
    // The reduced gradients are the same on every rank, so every rank decides alike.
    const bool unscaledFinite = lossScaler->unscaleGradients(params, compute.parameterFormat());
    finite = lossScaler->update(finite && unscaledFinite);
  }
  bool stepped = true;
  if (!finite) {
    // With loss scaling an overflow is routine (the scale backs off): `stop` then fires only
    // when the loss itself is not finite or the scale cannot back off any further.
    const bool diverged =
        !lossScaler || !std::isfinite(loss) || lossScaler->state().scale <= lossScaler->options().minScale;
    APS_CHECK(config.precision.nonfinite != "stop" || !diverged,
              "step {}: a gradient holds NaN or inf on some rank (precision.nonfinite = stop)", globalStep);
    if (lossScaler) {
      spdlog::warn("step {}: non-finite gradient, step skipped, loss scale now {}", globalStep, lossScaler->scale());
    } else {
      spdlog::warn("step {}: non-finite gradient on some rank, step skipped", globalStep);
    }
    ++skipped;
    stepped = false;
  } else {
    scheduler->apply();
    autograd::NoGradGuard noGrad;
    optimizer->step();
  }
  scheduler->advance();
  broadcastBuffersFromRankZero();
  model->zeroGrad();
  adaptFormats();

  interval.steps += 1;
  interval.images += static_cast<int64_t>(batches[0].size()) * world;
  interval.loss += loss;
  interval.compute += computeSeconds;
  interval.comm += comm.commSeconds;
  interval.exposed += comm.exposedSeconds;
  for (uint64_t b : comm.bytesSent) interval.bytes = std::max(interval.bytes, b);
  return stepped;
}

// A one-line progress bar with rate and ETA on a terminal (rank 0, logging.progress).
void Trainer::State::showProgress(double stepSeconds) {
  static const bool terminal = isatty(STDERR_FILENO) != 0;
  if (!terminal || !config.logging.progress || !isRoot()) return;
  const double ips = stepSeconds > 0 ? static_cast<double>(config.data.batchSize * world) / stepSeconds : 0.0;
  const auto eta = static_cast<int64_t>(stepSeconds * static_cast<double>(totalSteps - globalStep));
  const int width = 30;
  const auto filled = static_cast<int>(width * globalStep / std::max<int64_t>(totalSteps, 1));
  fmt::print(stderr, "\r[{}{}] {}/{} {:.0f} img/s ETA {}:{:02d}\033[K", std::string(static_cast<size_t>(filled), '#'),
             std::string(static_cast<size_t>(width - filled), '.'), globalStep, totalSteps, ips, eta / 60, eta % 60);
  std::fflush(stderr);
}

void Trainer::State::logInterval(IntervalStats& interval) {
  if (interval.steps == 0) return;
  if (isatty(STDERR_FILENO) != 0 && config.logging.progress && isRoot()) fmt::print(stderr, "\r\033[K");
  const double ips = interval.seconds > 0 ? static_cast<double>(interval.images) / interval.seconds : 0.0;
  spdlog::info(
      "epoch {} step {}/{} loss {:.4f} lr {:.5f} {:.0f} img/s data-wait {:.1f}% exposed-comm {:.1f}% "
      "sent {:.2f} MB/step",
      epoch, globalStep, totalSteps, interval.loss / interval.steps, optimizer->lr(), ips,
      100.0 * interval.dataWait / interval.seconds, 100.0 * interval.exposed / interval.seconds,
      static_cast<double>(interval.bytes) / 1e6);
  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto c = scaling->statistics(static_cast<int>(i));
    if (c.total == 0) continue;
    layers.push_back({{"name", params[i].name},
                      {"shift", scaling->lastShift(static_cast<int>(i))},
                      {"flushed", c.flushedFraction()},
                      {"saturated", c.saturatedFraction()},
                      {"rel_error", c.relativeError()}});
  }
  nlohmann::json scales = nlohmann::json::object();  // FP8-LM's mu per wire format
  for (const auto& [name, scaler] : autoscalers) scales[name] = scaler->state().mu;
  writeMetrics({{"type", "train"},
                {"epoch", epoch},
                {"step", globalStep},
                {"loss", metricValue(interval.loss / static_cast<double>(interval.steps))},
                {"lr", optimizer->lr()},
                {"images_per_s", ips},
                {"data_wait_s", interval.dataWait},
                {"compute_s", interval.compute},
                {"comm_s", interval.comm},
                {"exposed_comm_s", interval.exposed},
                {"bytes_sent_per_step", interval.bytes},
                {"skipped_steps", skipped},
                {"autoscale", scales},
                {"loss_scale", lossScaler ? lossScaler->scale() : 1.0f},
                {"layers", layers}});
  interval = {};
}

void Trainer::State::trainEpoch() {
  for (int i = 0; i < localRanks; ++i) {
    auto indices = sampler->shard(firstRank + i, static_cast<uint64_t>(epoch));
    // Resuming mid-epoch: skip the batches already trained (sample augmentation depends only
    // on (seed, epoch, sample), so the rest of the epoch is unchanged).
    indices.erase(indices.begin(), indices.begin() + std::min<int64_t>(static_cast<int64_t>(indices.size()),
                                                                       batchInEpoch * config.data.batchSize));
    loaders[static_cast<size_t>(i)]->startEpoch(static_cast<uint64_t>(epoch), std::move(indices));
  }
  std::vector<data::Batch> batches(static_cast<size_t>(localRanks));
  IntervalStats interval;
  while (batchInEpoch < stepsPerEpoch && globalStep < totalSteps) {
    const auto start = Clock::now();
    for (int i = 0; i < localRanks; ++i) {
      const double waitedBefore = loaders[static_cast<size_t>(i)]->stats().waitSeconds;
      APS_CHECK(loaders[static_cast<size_t>(i)]->next(batches[static_cast<size_t>(i)]),
                "rank {}: the data shard ended after {} of {} batches", firstRank + i, batchInEpoch, stepsPerEpoch);
      interval.dataWait += loaders[static_cast<size_t>(i)]->stats().waitSeconds - waitedBefore;
    }
    trainStep(batches, interval);
    ++batchInEpoch;
    ++globalStep;
    const double stepSeconds = secondsSince(start);
    interval.seconds += stepSeconds;
    showProgress(stepSeconds);
    if (globalStep % config.logging.interval == 0) logInterval(interval);
  }
  logInterval(interval);
}

TrainSummary Trainer::State::evaluate() {
  model->eval();
  autograd::NoGradGuard noGrad;
  autograd::ComputePrecisionGuard precisionGuard(compute);
  const int64_t classes = config.model.numClasses;
  int64_t size = testSet->size();
  if (config.data.testSamples > 0) size = std::min(size, config.data.testSamples);
  // Real ranks split the test set; a simulated world evaluates it once (same weights everywhere).
  const int shards = mpi ? world : 1;
  const int shard = mpi ? firstRank : 0;
  std::vector<int64_t> indices;
  for (int64_t i = shard; i < size; i += shards) indices.push_back(i);
  data::Loader loader(testSet, {config.data.testBatchSize, static_cast<int>(std::max<int64_t>(config.data.workers, 1)),
                                static_cast<int>(config.data.prefetch), false, config.seed});
  loader.startEpoch(0, indices);
  EvalAccumulator totals(info.segmentation, classes);
  data::Batch batch;
  while (loader.next(batch)) {
    const Tensor images = Tensor::fromVector(std::span<const float>(batch.images), batch.imageShape);
    const Tensor labels = Tensor::fromVector(std::span<const int64_t>(batch.labels), batch.labelShape);
    const Tensor logits = model->forward(images).contiguous();
    if (!info.segmentation) {
      const double meanLoss = ops::crossEntropy(logits, labels).item();
      totals.addClassification(logits.data<float>(), batch.labels.data(), batch.size(), meanLoss);
    } else {
      totals.addSegmentation(logits.data<float>(), batch.labels.data(), batch.size(),
                             batch.imageShape[2] * batch.imageShape[3]);
    }
  }
  totals.mergeOverProcesses([&](const std::vector<int64_t>& v) { return sumOverProcesses(v); },
                            [&](const std::vector<double>& v) { return sumOverProcesses(v); });
  model->train();
  return totals.summary();
}

void Trainer::State::report(const TrainSummary& summary, const char* type) {
  spdlog::info("{} epoch {} step {}: test {}", type, epoch, globalStep,
               summary.segmentation
                   ? fmt::format("mIoU {:.2f}% pixel accuracy {:.2f}%", 100 * summary.miou, 100 * summary.pixelAccuracy)
                   : fmt::format("top-1 {:.2f}% top-5 {:.2f}% loss {:.4f}", 100 * summary.top1, 100 * summary.top5,
                                 summary.loss));
  writeMetrics({{"type", type},
                {"epoch", epoch},
                {"step", globalStep},
                {"top1", summary.top1},
                {"top5", summary.top5},
                {"loss", metricValue(summary.loss)},
                {"miou", summary.miou},
                {"diverged", summary.diverged},
                {"pixel_accuracy", summary.pixelAccuracy},
                {"skipped_steps", skipped},
                {"seconds", summary.seconds}});
}

namespace {
Tensor int64Tensor(const std::vector<int64_t>& values) {
  return Tensor::fromVector(std::span<const int64_t>(values), {static_cast<int64_t>(values.size())});
}
// precision.<name> of a checkpoint, contiguous; throws naming the file when it is missing.
Tensor precisionEntry(const NamedTensors& section, const std::string& name, const std::string& path) {
  for (const auto& t : section) {
    if (t.name == name) return t.tensor.contiguous();
  }
  APS_FAIL("checkpoint '{}' has no precision.{} (written by another configuration or with fewer ranks?)", path, name);
}
std::vector<int64_t> int64Values(const NamedTensors& section, const std::string& name, const std::string& path) {
  const Tensor c = precisionEntry(section, name, path);
  APS_CHECK(c.dtype() == DType::Int64, "checkpoint '{}': precision.{} is not int64", path, name);
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}
}  // namespace

// Precision state for bit-identical resume: the statistics windows (they drive hybrid
// precision's decisions), how often each layer was widened, each autoscaler's mu, and every
// rank's error-feedback residuals (rank r's in "precision.residual.<r>", gathered to rank 0).
void Trainer::State::savePrecisionState(Checkpoint& c) {
  NamedTensors out;
  out.push_back({"statistics", int64Tensor(scaling->statisticsState())});
  out.push_back({"widenings", int64Tensor(widenings)});
  if (lossScaler) {
    const auto st = lossScaler->state();
    out.push_back({"loss_scale", int64Tensor({std::bit_cast<int64_t>(st.scale), st.goodSteps, st.skippedSteps})});
  }
  for (const auto& [name, scaler] : autoscalers) {
    const auto state = scaler->state();
    out.push_back({"autoscale." + name, int64Tensor({std::bit_cast<int64_t>(state.mu), state.step})});
  }
  if (config.precision.errorFeedback) {
    // Which residuals exist (the same on every rank), then each rank's, back to back.
    std::vector<int64_t> present;
    int64_t total = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto n = static_cast<int64_t>(scaling->residual(0, static_cast<int>(i)).size());
      present.push_back(n);
      total += n;
    }
    out.push_back({"residual_sizes", int64Tensor(present)});
    auto flat = [&](int local) {
      std::vector<float> v;
      v.reserve(static_cast<size_t>(total));
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& r = scaling->residual(local, static_cast<int>(i));
        v.insert(v.end(), r.begin(), r.end());
      }
      return v;
    };
    const Shape shape{total};
    if (mpi && world > 1) {
      std::vector<float> mine = flat(0);
      if (!isRoot()) {
        mpi->send(mine.data(), mine.size() * sizeof(float), 0, 7);
      } else {
        out.push_back({"residual.0", Tensor::fromVector(std::span<const float>(mine), shape)});
        for (int r = 1; r < world; ++r) {
          mpi->recv(mine.data(), mine.size() * sizeof(float), r, 7);
          out.push_back({fmt::format("residual.{}", r), Tensor::fromVector(std::span<const float>(mine), shape)});
        }
      }
    } else {
      for (int local = 0; local < localRanks; ++local) {
        const std::vector<float> v = flat(local);
        out.push_back(
            {fmt::format("residual.{}", firstRank + local), Tensor::fromVector(std::span<const float>(v), shape)});
      }
    }
  }
  c.addSection("precision", out);
}

void Trainer::State::restorePrecisionState(const Checkpoint& c, const std::string& path) {
  const NamedTensors section = c.section("precision");
  scaling->setStatisticsState(int64Values(section, "statistics", path));
  const std::vector<int64_t> widened = int64Values(section, "widenings", path);
  APS_CHECK(widened.size() == params.size(), "checkpoint '{}': precision.widenings has {} entries for {} parameters",
            path, widened.size(), params.size());
  bool rebuild = false;
  for (size_t l = 0; l < params.size(); ++l) {
    for (int64_t k = widenings[l]; k < widened[l]; ++k) {
      APS_CHECK(policy != nullptr, "checkpoint '{}' widened layer {} but hybrid_auto is off", path, params[l].name);
      policy->widenLayer(l);
      paramSpecs[l].format = policy->formatOf(l);
      rebuild = true;
    }
    widenings[l] = widened[l];
  }
  if (rebuild) buildReducer();
  if (lossScaler) {
    const auto v = int64Values(section, "loss_scale", path);
    APS_CHECK(v.size() == 3, "checkpoint '{}': precision.loss_scale has {} values", path, v.size());
    lossScaler->setState({std::bit_cast<double>(v[0]), v[1], v[2]});
  }
  for (const auto& [name, scaler] : autoscalers) {
    const auto v = int64Values(section, "autoscale." + name, path);
    APS_CHECK(v.size() == 2, "checkpoint '{}': precision.autoscale.{} has {} values", path, name, v.size());
    scaler->setState({std::bit_cast<double>(v[0]), v[1]});
  }
  if (config.precision.errorFeedback) {
    const std::vector<int64_t> sizes = int64Values(section, "residual_sizes", path);
    APS_CHECK(sizes.size() == params.size(), "checkpoint '{}': residuals of {} parameters, the model has {}", path,
              sizes.size(), params.size());
    int64_t used = 0;
    for (size_t i = 0; i < params.size(); ++i) used += sizes[i];
    for (int local = 0; local < localRanks; ++local) {
      const std::string name = fmt::format("residual.{}", firstRank + local);
      const Tensor t = precisionEntry(section, name, path);
      const float* at = t.data<float>();
      APS_CHECK(t.numel() == used, "checkpoint '{}': precision.{} has {} values, {} expected", path, name, t.numel(),
                used);
      for (size_t i = 0; i < params.size(); ++i) {
        scaling->setResidual(local, static_cast<int>(i), std::vector<float>(at, at + sizes[i]));
        at += sizes[i];
      }
    }
  }
}

void Trainer::State::save() {
  if (config.checkpoint.dir.empty()) return;
  Checkpoint c;
  savePrecisionState(c);  // collective: every rank sends its error-feedback residuals
  if (!isRoot()) return;
  std::filesystem::create_directories(config.checkpoint.dir);
  c.configHash = resumeHash(config);
  c.modelName = config.model.name;
  c.epoch = epoch;
  c.batchInEpoch = batchInEpoch;
  c.globalStep = globalStep;
  c.addSection("model", model->stateDict());
  c.addSection("optimizer", optimizer->stateDict());
  c.addSection("schedule", scheduler->stateDict());
  const std::string path = checkpointPath(config.checkpoint.dir, globalStep);
  saveCheckpoint(path, c);
  pruneCheckpoints(config.checkpoint.dir, config.checkpoint.keep, globalStep);
  spdlog::info("checkpoint {}", path);
}

RunIdentity Trainer::State::identity() const {
  return {config.model.name, resumeHash(config), stepsPerEpoch, totalSteps};
}

void Trainer::State::restore(const std::string& path) {
  const Checkpoint c = loadCheckpoint(path);
  restoreTrainingState(c, path, identity(), *model, *optimizer, *scheduler);
  epoch = c.epoch;
  batchInEpoch = c.batchInEpoch;
  globalStep = c.globalStep;
  restorePrecisionState(c, path);
  reducer->setStep(static_cast<uint64_t>(globalStep));  // stochastic rounding streams continue
  spdlog::info("resumed from {} at epoch {} step {}", path, epoch, globalStep);
}

// Sizes that cannot fit are refused before anything big is allocated, naming the keys that
// set them (a simulated world of 8192 ranks used to end in a bare std::bad_alloc). The estimate
// is a lower bound: per simulated rank three gradient-sized buffers (the rank's fp32 copy,
// its encoded form and the transport's chunks; measured: ResNet-20 at 64 and 256 simulated
// ranks grows by 3.1 MB per rank, 2.9x its 1.09 MB of fp32 gradients), a fourth with error
// feedback, and the loader's queue of batches; shared, the weights, their gradients and up to
// two optimizer moments. The limit is physical memory, or RLIMIT_AS when lower.
void Trainer::State::checkMemory() const {
  double paramCount = 0;
  for (const auto& p : params) paramCount += static_cast<double>(p.tensor.numel());
  const auto shape = trainSet->sampleShape();
  double sample = static_cast<double>(shape.image.empty() ? 0 : trainSet->sampleShape().imageNumel()) * 4.0;
  double labels = 8.0;
  for (int64_t d : shape.label) labels *= static_cast<double>(d);
  sample += labels;
  const double batchBytes = static_cast<double>(config.data.batchSize) * sample;
  const double perRankGrad = paramCount * 4.0 * (config.precision.errorFeedback ? 4.0 : 3.0);
  const double perRankData = batchBytes * static_cast<double>(config.data.prefetch + 1);
  const double shared = paramCount * 4.0 * 4.0;
  const double need = shared + static_cast<double>(localRanks) * (perRankGrad + perRankData);
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  const double pageSize = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (pages <= 0 || pageSize <= 0) return;
  double have = pages * pageSize;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    have = std::min(have, static_cast<double>(limit.rlim_cur));
  }
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  APS_CHECK(need <= have,
            "this run needs at least {:.1f} GiB of memory and the machine has {:.1f} GiB: {} {} x (gradient buffers "
            "{:.1f} MB for {} parameters + data.prefetch = {} batches of data.batch_size = {} samples, {:.1f} MB); "
            "lower {}",
            need / GiB, have / GiB, localRanks, sim ? "simulated ranks (comm.world_size)" : "rank", perRankGrad / 1e6,
            static_cast<int64_t>(paramCount), config.data.prefetch, config.data.batchSize, perRankData / 1e6,
            sim && localRanks > 1 ? "comm.world_size, data.batch_size or data.prefetch"
                                  : "data.batch_size or data.prefetch");
}

// A fresh run must not write over another run's checkpoints (it would also prune them, or
// have its own pruned by a run that got further): refuse, unless checkpoint.overwrite says to
// delete them first.
void Trainer::State::claimCheckpointDir(bool resuming, bool deleteOld) {
  const std::string& dir = config.checkpoint.dir;
  if (dir.empty()) return;
  if (deleteOld && isRoot()) removeStaleTemporaryFiles(dir);
  if (resuming) return;
  std::vector<std::string> found = listCheckpoints(dir);
  const auto final = std::filesystem::path(dir) / "final.safetensors";
  if (std::filesystem::exists(final)) found.push_back(final.string());
  if (found.empty()) return;
  APS_CHECK(config.checkpoint.overwrite,
            "checkpoint.dir '{}' already holds another run's checkpoints ({}{}); resume it with --resume, choose "
            "another checkpoint.dir, or set checkpoint.overwrite: true to delete them",
            dir, std::filesystem::path(found.back()).filename().string(),
            found.size() > 1 ? fmt::format(" and {} more", found.size() - 1) : "");
  if (!deleteOld || !isRoot()) return;
  for (const auto& path : found) std::filesystem::remove(path);
  spdlog::warn("checkpoint.overwrite: deleted {} files of an earlier run in {}", found.size(), dir);
}

// The directories and files a run writes must be writable before its first step, not after
// an epoch of training.
void Trainer::State::checkOutputsWritable() const {
  if (!isRoot()) return;
  auto probeDir = [](const std::filesystem::path& dir, const std::string& key) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    APS_CHECK(!ec && std::filesystem::is_directory(dir), "{} '{}': cannot create the directory: {}", key,
              dir.string(), ec ? ec.message() : "a file of that name exists");
    const auto probe = dir / fmt::format(".aps-write-test.{}", ::getpid());
    {
      std::ofstream out(probe);
      APS_CHECK(out.good() && (out << "x").good(), "{} '{}': the directory is not writable", key, dir.string());
    }
    std::filesystem::remove(probe, ec);
  };
  if (!config.checkpoint.dir.empty()) probeDir(config.checkpoint.dir, "checkpoint.dir");
  if (!config.logging.metricsFile.empty()) {
    const auto file = std::filesystem::path(config.logging.metricsFile);
    APS_CHECK(!std::filesystem::is_directory(file), "logging.metrics_file '{}' is a directory", file.string());
    probeDir(file.has_parent_path() ? file.parent_path() : std::filesystem::path("."), "logging.metrics_file");
  }
}

Trainer::Trainer(TrainConfig config, std::shared_ptr<comm::Communicator> communicator) : s_(std::make_unique<State>()) {
  s_->config = std::move(config);
  s_->setupWorld(std::move(communicator));
  s_->checkSameConfig();
  s_->setupModel();
}

Trainer::~Trainer() = default;

void Trainer::dryRun(const std::string& resumeFrom) {
  s_->setupData();
  s_->setupOptimizer();
  s_->setupPrecisionAndComm();
  s_->claimCheckpointDir(!resumeFrom.empty(), false);
  s_->checkOutputsWritable();
  if (!resumeFrom.empty()) {
    // Everything a resume reads and checks, on a throwaway copy of the state.
    s_->restore(resumeFrom);
  }
  spdlog::info("dry run: model {} ({} parameter tensors), {} training samples, {} steps per epoch, {} ranks",
               s_->config.model.name, s_->params.size(), s_->trainSet->size(), s_->stepsPerEpoch, s_->world);
}

NamedTensors Trainer::modelState() const { return s_->model->stateDict(); }

TrainSummary Trainer::run(const std::string& resumeFrom) {
  State& s = *s_;
  s.setupData();
  s.setupOptimizer();
  s.setupPrecisionAndComm();
  s.claimCheckpointDir(!resumeFrom.empty(), true);
  s.checkOutputsWritable();
  if (!resumeFrom.empty()) s.restore(resumeFrom);
  if (s.isRoot() && !s.config.logging.metricsFile.empty()) {
    s.metrics.open(s.config.logging.metricsFile, resumeFrom.empty() ? std::ios::trunc : std::ios::app);
    APS_CHECK(s.metrics.good(), "cannot write metrics file '{}'", s.config.logging.metricsFile);
  }
  nlohmann::json formats = nlohmann::json::array();
  for (size_t i = 0; i < s.params.size(); ++i) {
    formats.push_back({{"name", s.params[i].name},
                       {"format", precision::makeCodec(s.specs[static_cast<size_t>(s.formatOf[i])])->name()}});
  }
  s.writeMetrics({{"type", "formats"}, {"step", s.globalStep}, {"layers", formats}});
  spdlog::info("training {} on {} ({} ranks x batch {}, {} steps per epoch, {} steps)", s.config.model.name,
               s.config.data.dataset, s.world, s.config.data.batchSize, s.stepsPerEpoch, s.totalSteps);
  const auto start = Clock::now();
  while (s.globalStep < s.totalSteps) {
    s.trainEpoch();
    if (s.batchInEpoch < s.stepsPerEpoch) {  // max_steps reached inside an epoch
      s.save();
      break;
    }
    ++s.epoch;
    s.batchInEpoch = 0;
    const bool last = s.globalStep >= s.totalSteps;
    const int64_t evalInterval = s.config.evalIntervalEpochs;
    if (!last && evalInterval > 0 && s.epoch % evalInterval == 0) s.report(s.evaluate(), "eval");
    if (last || s.epoch % s.config.checkpoint.intervalEpochs == 0) s.save();
  }
  TrainSummary summary = s.evaluate();
  summary.steps = s.globalStep;
  summary.skippedSteps = s.skipped;
  summary.seconds = secondsSince(start);
  summary.diverged = summary.diverged || s.trainLossNonFinite;
  s.report(summary, "final");
  if (s.isRoot() && !s.config.checkpoint.dir.empty()) {
    const std::string path = (std::filesystem::path(s.config.checkpoint.dir) / "final.safetensors").string();
    models::saveWeights(*s.model, path);
    spdlog::info("final weights {}", path);
  }
  return summary;
}

}  // namespace aps::train
