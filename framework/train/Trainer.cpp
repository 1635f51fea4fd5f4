#include "framework/train/Trainer.h"

#include "comm/Communicator.h"
#include "comm/SimTransport.h"
#include "comm/SmallAllReduce.h"
#include "data/DatasetRecipes.h"
#include "data/DistributedSampler.h"
#include "data/Loader.h"
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/core/Parallel.h"
#include "framework/nn/Dropout.h"
#include "framework/ops/Loss.h"
#include "framework/optim/DynamicLossScaler.h"
#include "framework/optim/LrScheduler.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Evaluation.h"
#include "framework/train/FaultInjection.h"
#include "framework/train/GradientSync.h"
#include "framework/train/Preflight.h"
#include "framework/train/Recipes.h"
#include "framework/train/RunLog.h"
#include "framework/train/Restore.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
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

  std::unique_ptr<GradientSync> sync;  // gradient precision on the wire

  int64_t epoch = 0, batchInEpoch = 0, globalStep = 0, skipped = 0;
  bool trainLossNonFinite = false;  // some step's training loss was inf or NaN: the run diverged
  std::unique_ptr<RunLog> log;  // log lines, progress bar, metrics file
  const FaultInjection faults = FaultInjection::fromEnvironment();  // tests only; empty otherwise

  bool isRoot() const { return firstRank == 0; }

  void setupWorld(std::shared_ptr<comm::Communicator> communicator);
  void checkSameConfig();
  void setupModel();
  void setupData();
  void setupOptimizer();
  void setupPrecisionAndComm();
  void savePrecisionState(Checkpoint& c);
  void restorePrecisionState(const Checkpoint& c, const std::string& path);
  RunIdentity identity() const;
  void restore(const std::string& path);
  void save();
  void trainEpoch();
  bool trainStep(std::vector<data::Batch>& batches, IntervalStats& interval);
  std::vector<float> forwardBackward(const std::vector<data::Batch>& batches);
  double meanLossOverRanks(std::vector<float> losses);
  bool update(bool gradientsFinite, double loss);
  TrainSummary evaluate();
  RunPosition position() const { return {epoch, globalStep, totalSteps}; }
  void logInterval(IntervalStats& interval);
  void report(const TrainSummary& summary, const char* type);
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
  log = std::make_unique<RunLog>(isRoot(), config.logging.progress);
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
  // Before the per-rank sampler, loaders and buffers are allocated.
  checkMemoryFits(config, params, trainSet->sampleShape(), localRanks, sim != nullptr);
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
  const double lr = peakLearningRate(config, world);
  optimizer = makeOptimizer(config, params, lr);
  scheduler = std::make_unique<optim::LrScheduler>(makeSchedule(config, lr, stepsPerEpoch, totalSteps), *optimizer);
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

  sync = std::make_unique<GradientSync>(config, params, GradientSync::Ranks{transport, mpi.get(), world, firstRank,
                                                                         localRanks},
                                        [this](const nlohmann::json& line) { log->write(line); });
  sync->attach([this](int64_t param, int local, Tensor& grad) {
    faults.poisonGradient(firstRank + local, globalStep, param, grad);
  });
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

// Every local rank's forward and backward on its batch; backward's gradient-ready hooks hand
// the (loss-scaled) gradients to the reducer, whose buckets reduce while backward runs.
// Returns each local rank's loss.
std::vector<float> Trainer::State::forwardBackward(const std::vector<data::Batch>& batches) {
  std::vector<float> losses;
  NamedTensors rankZeroBuffers;
  for (int local = 0; local < localRanks; ++local) {
    const data::Batch& batch = batches[static_cast<size_t>(local)];
    sync->setLocalRank(local);
    // Dropout masks depend on (step, rank) only: the same under sim and mpi, and on resume.
    for (nn::Dropout* d : dropouts) d->setNextStream(static_cast<uint64_t>(globalStep * world + firstRank + local));
    const Tensor images = Tensor::fromVector(std::span<const float>(batch.images), batch.imageShape);
    const Tensor labels = Tensor::fromVector(std::span<const int64_t>(batch.labels), batch.labelShape);
    autograd::ComputePrecisionGuard precisionGuard(compute);
    const Tensor logits = model->forward(images);
    const Tensor loss = ops::crossEntropy(logits, labels, {0.0f, info.segmentation ? 255 : -100});
    losses.push_back(loss.item());
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
  return losses;
}

// The step's loss averaged over every rank (the logged loss): an fp32 sum in rank order
// through the transport, so simulated and real ranks log the same number.
double Trainer::State::meanLossOverRanks(std::vector<float> losses) {
  std::vector<float*> perRank;
  for (float& l : losses) perRank.push_back(&l);
  comm::smallAllReduce(*transport, perRank, 1, comm::ReduceOp::Sum);
  return static_cast<double>(losses[0]) / world;
}

// Unscales the reduced gradients (16-bit compute), then steps the optimizer, or skips the
// step when a gradient is not finite. Every rank holds the same reduced gradients, so every
// rank decides alike. Returns whether the optimizer stepped.
bool Trainer::State::update(bool gradientsFinite, double loss) {
  bool finite = gradientsFinite;
  if (lossScaler) {
    const bool unscaledFinite = lossScaler->unscaleGradients(params, compute.parameterFormat());
    finite = lossScaler->update(finite && unscaledFinite);
  }
  if (finite) {
    scheduler->apply();
    autograd::NoGradGuard noGrad;
    optimizer->step();
    return true;
  }
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
  return false;
}

// One optimizer step of every local rank, top to bottom.
bool Trainer::State::trainStep(std::vector<data::Batch>& batches, IntervalStats& interval) {
  const auto start = Clock::now();
  faults.beforeStep(firstRank, localRanks, globalStep);
  std::vector<float> losses = forwardBackward(batches);
  const double computeSeconds = secondsSince(start);
  const comm::StepCommStats comm = sync->finishStep();  // the reduced, averaged gradients are in place
  const double loss = meanLossOverRanks(std::move(losses));
  if (!std::isfinite(loss)) trainLossNonFinite = true;
  const bool stepped = update(!comm.nonFinite, loss);
  scheduler->advance();
  broadcastBuffersFromRankZero();
  model->zeroGrad();
  sync->adaptFormats(globalStep);

  interval.steps += 1;
  interval.images += static_cast<int64_t>(batches[0].size()) * world;
  interval.loss += loss;
  interval.compute += computeSeconds;
  interval.comm += comm.commSeconds;
  interval.exposed += comm.exposedSeconds;
  // What rank 0 sent (ranks differ by a few bytes where chunks are uneven): the same figure
  // under sim and mpi, whose metrics rank 0 writes.
  if (!comm.bytesSent.empty() && firstRank == 0) interval.bytes = std::max(interval.bytes, comm.bytesSent[0]);
  return stepped;
}

void Trainer::State::logInterval(IntervalStats& interval) {
  log->interval(interval, position(), optimizer->lr(),
                {{"skipped_steps", skipped},
                 {"autoscale", sync->autoscaleRecord()},
                 {"loss_scale", lossScaler ? lossScaler->scale() : 1.0f},
                 {"layers", sync->layerRecords()}});
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
    log->progress(position(), stepSeconds, config.data.batchSize * world);
    if (globalStep % config.logging.interval == 0) logInterval(interval);
  }
  logInterval(interval);
}

// Real ranks split the test set; a simulated world evaluates it once (same weights everywhere).
TrainSummary Trainer::State::evaluate() {
  EvalSetup setup;
  setup.classes = config.model.numClasses;
  setup.segmentation = info.segmentation;
  setup.samples = config.data.testSamples;
  setup.shards = mpi ? world : 1;
  setup.shard = mpi ? firstRank : 0;
  setup.batchSize = config.data.testBatchSize;
  setup.workers = static_cast<int>(std::max<int64_t>(config.data.workers, 1));
  setup.prefetch = static_cast<int>(config.data.prefetch);
  setup.seed = config.seed;
  setup.compute = compute;
  setup.sumCounts = [this](const std::vector<int64_t>& v) { return sumOverProcesses(v); };
  setup.sumDoubles = [this](const std::vector<double>& v) { return sumOverProcesses(v); };
  return train::evaluate(*model, testSet, setup);
}

void Trainer::State::report(const TrainSummary& summary, const char* type) {
  log->evaluation(summary, type, position(), skipped);
}

// The checkpoint's "precision" section: the wire precision's state (GradientSync) and the
// loss scaler's, in the order earlier versions wrote it.
void Trainer::State::savePrecisionState(Checkpoint& c) {
  NamedTensors out = sync->saveState();  // collective: every rank sends its error-feedback residuals
  if (lossScaler) out.insert(out.begin() + 2, lossScaler->stateDict().front());
  c.addSection("precision", out);
}

void Trainer::State::restorePrecisionState(const Checkpoint& c, const std::string& path) {
  const NamedTensors section = c.section("precision");
  sync->loadState(section, path, static_cast<uint64_t>(globalStep));
  if (!lossScaler) return;
  try {
    lossScaler->loadStateDict(section);
  } catch (const Error& e) {
    APS_FAIL("checkpoint '{}', precision section: {}", path, e.what());
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
  sync->setStep(static_cast<uint64_t>(globalStep));  // stochastic rounding streams continue
  spdlog::info("resumed from {} at epoch {} step {}", path, epoch, globalStep);
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
  claimCheckpointDir(s_->config, !resumeFrom.empty(), false, s_->isRoot());
  if (s_->isRoot()) checkOutputsWritable(s_->config);
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
  claimCheckpointDir(s.config, !resumeFrom.empty(), true, s.isRoot());
  if (s.isRoot()) checkOutputsWritable(s.config);
  if (!resumeFrom.empty()) s.restore(resumeFrom);
  s.log->openMetrics(s.config.logging.metricsFile, !resumeFrom.empty());
  s.log->write({{"type", "formats"}, {"step", s.globalStep}, {"layers", s.sync->formatsRecord()}});
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
