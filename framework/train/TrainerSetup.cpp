// Building a run from its config (world, model, data, optimizer, precision) and its
// checkpoints: the parts of Trainer::State that the loop (Trainer.cpp) does not need to show.
#include "comm/MpiCommunicator.h"
#include "comm/NcclCommunicator.h"
#include "comm/SmallAllReduce.h"
#include "data/RangeDataset.h"
#include "framework/autograd/Function.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/core/Parallel.h"
#include "framework/ops/Backend.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/train/Preflight.h"
#include "framework/train/Recipes.h"
#include "framework/train/Threads.h"
#include "framework/train/TrainerState.h"
#include "models/Weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace aps::train {

namespace {

// The data module's recipe names for the config's dataset names.
std::string recipeName(const std::string& dataset) { return dataset == "imagefolder" ? "imagenet" : dataset; }

std::string testSplit(const std::string& dataset) {
  if (dataset == "imagefolder" || dataset == "cityscapes" || dataset == "voc") return "val";
  return "test";
}

// A model's parameters, with gradients that exist from the start (backward accumulates in place
// and the reducer's buffer views stay valid for the whole run), and its dropout layers.
void prepareForTraining(nn::Module& net, NamedTensors& params, std::vector<nn::Dropout*>& dropouts) {
  params = net.namedParameters();
  for (auto& p : params) p.tensor.setGrad(Tensor::zeros(p.tensor.sizes(), DType::Float32, p.tensor.device()));
  for (auto& [name, module] : net.namedModules()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(module)) dropouts.push_back(d);
  }
}

}  // namespace

// `device` (docs/ARCHITECTURE.md, GPU backend), checked and then made this process's: the CUDA
// device and its cuDNN/cuBLAS math (cuda.*) are set. Never ignored: a cuda device that this build
// or machine cannot give is refused with the reason, and so is what the GPU path does not run
// yet, rather than training on the CPU by mistake. comm.backend nccl: `ncclDevice` is the GPU
// the NCCL communicator took for this rank (its node-local rank's).
static Device selectDevice(const TrainConfig& config, int ncclDevice) {
  Device device = parseDevice(config.device);
  if (device.isCpu()) return device;
  if (ncclDevice >= 0) device = Device::cuda(ncclDevice);
  cuda::requireDevice(device.index, fmt::format("{}: device = '{}'", config.sourceFile, config.device));
  cuda::setDevice(device.index);
  ops::setCudaMath({config.cuda.allowTf32, config.cuda.deterministic});
  spdlog::info("training on {}: {}", deviceName(device), cuda::deviceDescription(device.index));
  return device;
}

void Trainer::State::setupWorld(std::shared_ptr<comm::Communicator> communicator) {
  int ncclDevice = -1;
  if (config.comm.backend == "nccl") {
    APS_CHECK(config.device == "cuda",
              "{}: device = '{}': with comm.backend: nccl each rank takes the GPU of its node-local rank; use "
              "device: cuda",
              config.sourceFile, config.device);
    auto* bootstrap = dynamic_cast<comm::MpiCommunicator*>(communicator.get());
    APS_CHECK(bootstrap != nullptr, "comm.backend is nccl but no MPI communicator was given to bootstrap it");
    nccl = comm::makeNcclCommunicator(*bootstrap);
    ncclDevice = cuda::currentDevice();
  }
  device = selectDevice(config, ncclDevice);
  if (config.comm.backend == "sim") {
    sim = std::make_unique<comm::SimTransport>(static_cast<int>(config.comm.worldSize));
    transport = sim.get();
    // On a GPU the gradients are reduced there.
    if (device.isCuda())
      deviceSim = std::make_unique<comm::SimTransport>(static_cast<int>(config.comm.worldSize), device);
  } else {
    APS_CHECK(communicator != nullptr, "comm.backend is {} but no MPI communicator was given", config.comm.backend);
    mpi = std::move(communicator);
    transport = mpi.get();
  }
  const int globalFirst = transport->firstLocalRank();
  setupModelParallel();
  world = transport->worldSize();
  firstRank = transport->firstLocalRank();
  localRanks = transport->localRankCount();
  initLogging(globalFirst, config.logging.allRanks, parseLogLevel(config.logging.level));
  const ThreadChoice threads = chooseThreads(config.threads, mpi ? mpi->ranksOnNode() : 1);
  setNumThreads(threads.threads);
  spdlog::info("{} thread{} per rank ({})", threads.threads, threads.threads == 1 ? "" : "s", threads.why);
  log = std::make_unique<RunLog>(isRoot(), config.logging.progress);
}

// parallel.model_parallel = M: the world's D x M ranks as data-parallel groups (ranks m, M + m,
// 2 M + m, ...) and model-parallel groups (ranks d M .. d M + M - 1, the same batch). Under mpi
// this process is rank d M + m and computes slice m; the simulator computes every slice of a
// group in one forward and runs data-parallel group 0 for the replicated parameters, which every
// group reduces alike (ModelParallel.h).
void Trainer::State::setupModelParallel() {
  const int m = static_cast<int>(config.parallel.modelParallel);
  if (m == 1) return;
  worldTransport = transport;
  const int all = transport->worldSize();
  APS_CHECK(all % m == 0,
            "{}: 'parallel.model_parallel' = {} does not divide the {} ranks of this run (the world is data-parallel "
            "groups x model-parallel ranks)",
            config.sourceFile, m, all);
  const int groups = all / m;
  std::vector<int> owned;
  if (sim) {
    for (int s = 0; s < m; ++s) owned.push_back(s);
    dataGroup = std::make_unique<comm::SubTransport>(*transport, 0, m, groups);
    modelGroup = std::make_unique<comm::SubTransport>(*transport, 0, 1, m);
  } else {
    const int rank = transport->firstLocalRank();
    mpRank = rank % m;
    owned.push_back(mpRank);
    dataGroup = std::make_unique<comm::SubTransport>(*transport, mpRank, m, groups);
    modelGroup = std::make_unique<comm::SubTransport>(*transport, rank - mpRank, 1, m);
  }
  transport = dataGroup.get();
  const auto& p = config.parallel;
  mp = std::make_shared<ModelParallelGroup>(ModelParallelGroup::Options{
      m, owned, modelGroup.get(), p.activationFormat.spec, p.activationScaling == "aps",
      config.seed});
  // The activation exchanges run on this thread, inside forward and backward; the gradient
  // reducer's thread must not use the transport meanwhile, so buckets reduce after backward.
  if (config.comm.overlap) spdlog::info("parallel.model_parallel: gradients reduce after backward (comm.overlap off)");
  config.comm.overlap = false;
  spdlog::info("model parallelism: {} data-parallel groups x {} ranks; activations and errors in {}", groups, m,
               mp->codec().name());
}

std::vector<GradientSync*> Trainer::State::allSyncs() const {
  std::vector<GradientSync*> out{sync.get()};
  for (const auto& s : sliceSyncs) out.push_back(s.get());
  return out;
}

void Trainer::State::checkSameConfig() {
  // Every rank of the world (with model parallelism, of every group).
  comm::Transport& everyone = worldTransport != nullptr ? *worldTransport : *transport;
  const int ranks = everyone.worldSize(), local = everyone.localRankCount();
  if (local == ranks) return;  // one process runs every rank: there is nothing to compare
  const uint64_t hash = configHash(config);
  std::vector<const void*> mine(static_cast<size_t>(local), &hash);
  std::vector<uint64_t> all(static_cast<size_t>(ranks));
  comm::allGatherBytes(everyone, mine, sizeof(hash), all.data());
  for (int r = 0; r < ranks; ++r) {
    APS_CHECK(all[static_cast<size_t>(r)] == all[0],
              "rank {} runs a different configuration than rank 0 (config hash {:016x} vs {:016x}); every rank "
              "must load the same config and --set overrides",
              r, all[static_cast<size_t>(r)], all[0]);
  }
}

void Trainer::State::setupModel() {
  info = models::modelInfo(config.model.name);
  model = models::createModel(config.model.name, {config.model.numClasses, config.model.inChannels, config.seed, config.model.widths});
  if (!config.model.initFrom.empty()) {
    const auto report =
        models::initialFrom(*model, config.model.initFrom, models::parseKeyRenames(config.model.initMap));
    APS_CHECK(report.loaded > 0,
              "model.init_from '{}': no tensor of the file matches the {} model ({}); set "
              "model.init_map",
              config.model.initFrom, config.model.name, report.summary());
    spdlog::info("initial weights from {}: {}", config.model.initFrom, report.summary());
  }
  if (mp) {
    const auto split = splitLinearLayers(*model, config.parallel.split, mp);
    spdlog::info("split over {} ranks by output features: {}", mp->size(), fmt::join(split, ", "));
  }
  model->to(device);  // built and initialised on the host, as on the CPU: the same weights
  prepareForTraining(*model, params, dropouts);
}

void Trainer::State::setupData() {
  const auto& d = config.data;
  const auto maxPixels = static_cast<uint64_t>(d.maxImagePixels);
  const int canvas = static_cast<int>(d.canvas), items = static_cast<int>(d.maxItems);
  data::DatasetSpec train{recipeName(d.dataset), d.path, "train", d.augment, 0, config.seed, 0, maxPixels, canvas, items};
  data::DatasetSpec test{recipeName(d.dataset), d.path, testSplit(d.dataset), false, 0, config.seed + 1, 0,
                         maxPixels,          canvas,        items};
  trainSet = data::makeDataset(train);
  testSet = data::makeDataset(test);
  APS_CHECK(trainSet->numClasses() == config.model.numClasses, "model.num_classes = {} but dataset '{}' has {} classes",
            config.model.numClasses, d.dataset, trainSet->numClasses());
  const auto shape = trainSet->sampleShape();
  APS_CHECK(shape.image.at(0) == config.model.inChannels, "model.in_channels = {} but dataset '{}' has {} channels",
            config.model.inChannels, d.dataset, shape.image.at(0));
  if (config.model.name == "mlp") {
    int64_t features = 1;
    for (const int64_t s : shape.image) features *= s;
    APS_CHECK(!config.model.widths.empty() && config.model.widths.front() == features,
              "model.widths[0] = {} but dataset '{}' has {} features per sample ({}): the mlp's input layer must "
              "take them all",
              config.model.widths.empty() ? 0 : config.model.widths.front(), d.dataset, features,
              fmt::format("{}", fmt::join(shape.image, " x ")));
  }
  APS_CHECK(info.segmentation == !shape.label.empty(), "model '{}' is a {} model but dataset '{}' is for {}", info.name,
            info.segmentation ? "segmentation" : "classification", d.dataset,
            shape.label.empty() ? "classification" : "segmentation");
  // Before the per-rank sampler, loaders and buffers are allocated.
  checkMemoryFits(config, params, trainSet->sampleShape(), localRanks, sim != nullptr);
  int64_t size = trainSet->size();
  if (d.trainSamples > 0) size = std::min(size, d.trainSamples);
  if (d.validationSamples > 0) {
    APS_CHECK(d.validationSamples < size,
              "data.validation_samples = {} leaves nothing to train on: the training set has {} samples{}",
              d.validationSamples, size, d.trainSamples > 0 ? " (data.train_samples)" : "");
    // The last samples of the (possibly shortened) training set, as the test set is read:
    // without augmentation.
    data::DatasetSpec plain = train;
    plain.augment = false;
    size -= d.validationSamples;
    validationSet = std::make_shared<data::RangeDataset>(data::makeDataset(plain), size, d.validationSamples);
    spdlog::info("validation: the last {} training samples, held out of training (data.validation_samples)",
                 d.validationSamples);
  }
  if (config.checkpoint.keepBest || config.eval.earlyStopping > 0) {
    monitor = std::make_unique<EvalMonitor>(config.eval.monitor, config.eval.minDelta, info.segmentation);
  }
  sampler = std::make_unique<data::DistributedSampler>(size, world, firstRank, true, config.seed, true);
  stepsPerEpoch = sampler->numSamples() / stepBatch();
  APS_CHECK(stepsPerEpoch > 0,
            "data.batch_size = {}{} is larger than a rank's shard ({} samples of {} over {} ranks): no full batch",
            d.batchSize,
            config.optimizer.accumulationSteps > 1
                ? fmt::format(" x optimizer.accumulation_steps = {}", config.optimizer.accumulationSteps)
                : std::string(),
            sampler->numSamples(), size, world);
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
  const double lr = peakLearningRate(config, world) * (worldChange ? worldChange->lrScale : 1.0);
  optimizer = makeOptimizer(config, params, lr);
  scheduler = std::make_unique<optim::LrScheduler>(makeSchedule(config, lr, stepsPerEpoch, totalSteps), *optimizer);
}

// comm.sim_workers: simulated ranks computed side by side, one thread each, on copies of the
// model (auto: as many as the threads, at most the simulated ranks). A second thread speeds a
// one-image rank up by about a quarter; two such ranks side by side, one thread each, double it.
void Trainer::State::setupModelCopies() {
  // On a GPU the simulated ranks run one after another on the one model.
  // Model parallelism: one forward computes a whole model-parallel group, whose exchanges
  // run in turn.
  if (!copies.empty() || sim == nullptr || localRanks < 2 || !device.isCpu() || mp) return;
  const int64_t wanted = config.comm.simWorkers > 0 ? config.comm.simWorkers : numThreads();
  const int count = static_cast<int>(std::min<int64_t>(wanted, localRanks));
  for (int c = 1; c < count; ++c) {
    ModelCopy copy;
    copy.model =
        models::createModel(config.model.name, {config.model.numClasses, config.model.inChannels, config.seed, config.model.widths});
    prepareForTraining(*copy.model, copy.params, copy.dropouts);
    copies.push_back(std::move(copy));
  }
  if (count > 1) spdlog::info("{} simulated ranks at a time, one thread each (comm.sim_workers)", count);
}

void Trainer::State::setupPrecisionAndComm() {
  const auto& p = config.precision;
  compute = p.compute;
  if (!compute.isFp32()) {
    // 16-bit compute (autograd/ComputePrecision.h): loss scaling keeps small gradients above
    // the format's underflow; pure modes store weights and optimizer state in 16 bits.
    if (p.lossScaling != "none") {
      aps::precision::DynamicLossScaler::Options o;
      o.initialScale = p.lossScale;
      if (p.lossScaling == "static") o.growthFactor = o.backoffFactor = 1.0;
      o.minScale = std::min(o.minScale, o.initialScale);
      o.maxScale = std::max(o.maxScale, o.initialScale);
      lossScaler = std::make_unique<aps::precision::DynamicLossScaler>(o);
    }
    if (compute.isPure()) optimizer->setStorageFormat(compute.format(), p.stochasticUpdate, config.seed);
  }

  setupModelCopies();
  std::vector<NamedTensors> copyParams;
  for (const ModelCopy& copy : copies) copyParams.push_back(copy.params);
  // On a GPU the reducer takes its gradients from host copies of the parameters, unless NCCL or
  // the simulator reduces them where they lie.
  if (!device.isCpu()) deviceBatches = std::make_unique<DeviceBatches>(device, localRanks);
  if (!device.isCpu() && !nccl && !deviceSim) {
    hostParams.clear();
    for (const auto& param : params) {
      Tensor host = Tensor::zeros(param.tensor.sizes());
      host.setRequiresGrad();  // a leaf, as the reducer hooks its parameters
      host.setGrad(Tensor::zeros(param.tensor.sizes()));
      hostParams.push_back({param.name, host});
    }
  }
  const GradientSync::MetricsSink writeMetrics = [this](const nlohmann::json& line) { log->write(line); };
  NamedTensors replicated = hostParams.empty() ? params : hostParams;
  if (mp) {
    // The split layers' slices apart: each slice's gradients reduce over its data-parallel group.
    std::vector<NamedTensors> slices(mp->owned().size());
    NamedTensors rest;
    for (const auto& param : replicated) {
      const int s = sliceOf(param.name);
      if (s < 0) {
        rest.push_back(param);
        continue;
      }
      const auto k = std::find(mp->owned().begin(), mp->owned().end(), s) - mp->owned().begin();
      slices[static_cast<size_t>(k)].push_back(param);
    }
    replicated = std::move(rest);
    for (size_t k = 0; k < slices.size(); ++k) {
      GradientSync::Ranks ranks{transport, world, firstRank, localRanks};
      if (sim) {
        sliceGroups.push_back(std::make_unique<comm::SubTransport>(*worldTransport, mp->owned()[k], mp->size(), world));
        ranks.transport = sliceGroups.back().get();
      }
      // Rank 0's metrics: slice 0's (what mpi's rank 0 computes).
      sliceSyncs.push_back(std::make_unique<GradientSync>(config, slices[k], ranks,
                                                          k == 0 ? writeMetrics : [](const nlohmann::json&) {}));
    }
  }
  sync = std::make_unique<GradientSync>(
      config, replicated,
      GradientSync::Ranks{transport, world, firstRank, localRanks,
                          nccl ? static_cast<comm::Transport*>(nccl.get()) : deviceSim.get()},
      writeMetrics, copyParams);
  // Only injected faults look at a gradient before the reducer takes it.
  GradientSync::BeforeReady poison;
  if (!faults.empty()) {
    poison = [this](int64_t param, int local, Tensor& grad) {
      faults.poisonGradient(firstRank + local, globalStep, param, grad);
    };
  }
  for (GradientSync* each : allSyncs()) each->attach(poison);
  // Each device gradient, once final, is copied to its host parameter's .grad and handed on to
  // the reducer's hooks there.
  for (size_t i = 0; i < hostParams.size(); ++i) {
    autograd::addGradReadyHook(params[i].tensor, [host = hostParams[i].tensor.implPtr()](Tensor& leaf) {
      Tensor mirror(host);
      Tensor grad = mirror.grad();
      grad.copyFrom(leaf.grad());
      autograd::runLeafHooks(mirror);
    });
  }
}

// Element-wise sums over the processes, in rank order, the same on every rank (int64 counts
// are checked against overflow).

void Trainer::State::savePrecisionState(Checkpoint& c) {
  NamedTensors out = sync->stateDict();  // collective: every rank sends its error-feedback residuals
  if (lossScaler) out.insert(out.begin() + 2, lossScaler->stateDict().front());
  if (mp) {
    // Which split wrote it: the replicated parameters' statistics are the only sync state then.
    Tensor m = Tensor::zeros({}, DType::Int64);
    m.data<int64_t>()[0] = mp->size();
    out.push_back({"model_parallel", m});
  }
  c.addSection("precision", out);
}

void Trainer::State::restorePrecisionState(const Checkpoint& c, const std::string& path) {
  const NamedTensors section = c.section("precision");
  // Model parallelism on either side: the reducers' layers differ with the split, and what
  // persists of them (statistics windows; error feedback, autoscale and hybrid_auto are refused
  // with model_parallel) changes no bits: they restart.
  const bool split = mp || std::any_of(section.begin(), section.end(),
                                       [](const NamedTensor& t) { return t.name == "model_parallel"; });
  NamedTensors state = section;
  // Another world size: its ranks were others, so the residuals start from zero.
  if (worldChange) std::erase_if(state, [](const NamedTensor& t) { return t.name.starts_with("residual"); });
  try {
    if (split) {
      spdlog::info("checkpoint '{}': model parallelism: the gradient statistics windows restart", path);
    } else {
      sync->loadStateDict(state);
    }
    if (lossScaler) lossScaler->loadStateDict(state);
  } catch (const Error& e) {
    APS_FAIL("checkpoint '{}', precision section: {}", path, e.what());
  }
}

void Trainer::State::save() {
  if (config.checkpoint.dir.empty()) return;
  Checkpoint c;
  savePrecisionState(c);  // collective: every rank sends its error-feedback residuals
  // Whole split layers (collective over the model-parallel group): a checkpoint resumes with any M.
  const NamedTensors modelState = wholeState(model->stateDict());
  const NamedTensors optimizerState = wholeState(optimizer->stateDict());
  if (!isRoot()) return;
  std::filesystem::create_directories(config.checkpoint.dir);
  c.configHash = resumeHash(config);
  c.config = resumeYaml(config);
  c.modelName = config.model.name;
  c.epoch = epoch;
  c.batchInEpoch = batchInEpoch;
  c.globalStep = globalStep;
  c.world = world;
  c.rankBatch = stepBatch();
  c.addSection("model", modelState);
  c.addSection("optimizer", optimizerState);
  NamedTensors schedule = scheduler->stateDict();
  // The steps the LR schedule is laid out over (epochs or max_steps): a resume that changes
  // them changes the schedule from there on, and says so (restoreTrainingState).
  Tensor total = Tensor::zeros({}, DType::Int64);
  total.data<int64_t>()[0] = totalSteps;
  schedule.push_back({"total_steps", total});
  c.addSection("schedule", schedule);
  if (monitor) c.addSection("monitor", monitor->stateDict());
  const std::string path = checkpointPath(config.checkpoint.dir, globalStep);
  saveCheckpoint(path, c);
  pruneCheckpoints(config.checkpoint.dir, config.checkpoint.keep, globalStep);
  spdlog::info("checkpoint {}", path);
}

RunIdentity Trainer::State::identity() const {
  RunIdentity run{config.model.name, resumeHash(config), stepsPerEpoch, totalSteps, resumeYaml(config), {}};
  if (worldChange) run.mayDiffer = {"comm.backend", "comm.world_size", "data.batch_size"};
  return run;
}

void Trainer::State::restore(const std::string& path) {
  Checkpoint c = resumed ? std::move(*resumed) : loadCheckpoint(path);
  resumed.reset();
  if (worldChange) remapPosition(c, path);
  if (mp) {
    // The checkpoint's whole split layers, cut to the slices this process computes.
    NamedTensors modelWhole = c.section("model"), optimizerWhole = c.section("optimizer");
    const NamedTensors modelSliced = model->stateDict();
    std::erase_if(c.tensors, [](const NamedTensor& t) {
      return t.name.starts_with("model.") || t.name.starts_with("optimizer.");
    });
    c.addSection("model", splitToSlices(modelWhole, modelSliced, *mp));
    c.addSection("optimizer", splitToSlices(optimizerWhole, modelSliced, *mp));
  }
  restoreTrainingState(c, path, identity(), *model, *optimizer, *scheduler);
  epoch = c.epoch;
  batchInEpoch = c.batchInEpoch;
  globalStep = c.globalStep;
  // The stochastic rounding streams continue from there (and a reducer rebuilt on loading).
  for (GradientSync* each : allSyncs()) each->setStep(static_cast<uint64_t>(globalStep));
  restorePrecisionState(c, path);
  if (monitor) loadSection(c, path, "monitor", *monitor);
  spdlog::info("resumed from {} at epoch {} step {}", path, epoch, globalStep);
}

// --resume of a checkpoint another number of ranks wrote (a requeued job on a new allocation):
// refused unless checkpoint.world_change says how. keep_global_batch gives each rank the global
// batch / ranks; keep_rank_batch keeps the per-rank batch and scales the LR with the global
// batch (unless schedule.scale_with_batch does). Called before the data is set up.
void Trainer::State::adaptToCheckpointWorld(const std::string& path) {
  const Checkpoint& c = *resumed;
  if (c.world == 0 || c.world == world) return;  // 0: written before aps recorded the world
  const int64_t oldGlobal = c.world * c.rankBatch;
  const std::string& mode = config.checkpoint.worldChange;
  APS_CHECK(mode != "refuse",
            "checkpoint '{}' was written by {} ranks x batch {} (global batch {}); this run has {} ranks. Resuming on "
            "another world size changes the run: set checkpoint.world_change to keep_global_batch (each rank takes "
            "{} / {}) or keep_rank_batch (global batch {} x {}, the LR scaled with it)",
            path, c.world, c.rankBatch, oldGlobal, world, oldGlobal, world, world, stepBatch());
  auto change = std::make_unique<WorldChange>();
  change->oldWorld = c.world;
  change->oldGlobalBatch = oldGlobal;
  if (mode == "keep_global_batch") {
    const int64_t accumulation = config.optimizer.accumulationSteps;
    APS_CHECK(oldGlobal % (world * accumulation) == 0,
              "checkpoint.world_change: keep_global_batch: the global batch {} of checkpoint '{}' does not divide over "
              "{} ranks{}; use keep_rank_batch or a rank count that divides it",
              oldGlobal, path, world,
              accumulation > 1 ? fmt::format(" x {} accumulated micro-batches", accumulation) : std::string());
    config.data.batchSize = oldGlobal / (world * accumulation);
    config.resolved["data"]["batch_size"] = config.data.batchSize;
  } else if (!config.schedule.scaleWithBatch) {
    change->lrScale = static_cast<double>(world * stepBatch()) / static_cast<double>(oldGlobal);
  }
  spdlog::warn(
      "resuming '{}' on {} ranks x batch {} where it was written by {} ranks x batch {} (checkpoint.world_change: {}): "
      "the global batch is {}{}; each rank's data shard, random streams and position in the epoch are re-derived "
      "for {} ranks (the rest of this epoch is not the samples the old world would have seen), and error-feedback "
      "residuals restart from zero",
      path, world, stepBatch(), c.world, c.rankBatch, mode, world * stepBatch(),
      change->lrScale != 1.0 ? fmt::format(", the LR x {:.4g}", change->lrScale) : std::string(), world);
  worldChange = std::move(change);
}

// The checkpoint's position in this run's steps: the same epoch, after as many of its samples
// as the old world had trained (rounded down to a whole step); the schedule's and optimizer's
// step counts follow.
void Trainer::State::remapPosition(Checkpoint& c, const std::string& path) const {
  const int64_t samples = c.batchInEpoch * worldChange->oldGlobalBatch;
  const int64_t inEpoch = std::min(samples / (world * stepBatch()), stepsPerEpoch - 1);
  const int64_t step = c.epoch * stepsPerEpoch + inEpoch;
  if (step != c.globalStep) {
    spdlog::info("checkpoint '{}': epoch {} step {} of {} ranks is step {} ({} of epoch {}) here", path, c.epoch,
                 c.globalStep, worldChange->oldWorld, step, inEpoch, c.epoch);
  }
  auto setScalar = [&](const std::string& name, auto update) {
    for (auto& t : c.tensors) {
      if (t.name == name && t.tensor.dtype() == DType::Int64 && t.tensor.numel() == 1) {
        Tensor fresh = Tensor::zeros({}, DType::Int64);
        fresh.data<int64_t>()[0] = update(t.tensor.contiguous().data<int64_t>()[0]);
        t.tensor = fresh;
      }
    }
  };
  setScalar("schedule.schedule_step", [&](int64_t) { return step; });
  setScalar("optimizer.step", [&](int64_t old) { return std::min(old, step); });
  c.batchInEpoch = inEpoch;
  c.globalStep = step;
}

}  // namespace aps::train
