// The training loop: one step reads top to bottom (next batches, forward and backward on every
// local rank while the buckets reduce, wait for the reduced gradients, update, log), then
// epochs, evaluation and checkpoints around it. Setting the run up from its config is in
// TrainerSetup.cpp; the state both share is TrainerState.h.
#include "comm/SmallAllReduce.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/core/Parallel.h"
#include "framework/optim/ClipGrad.h"
#include "framework/ops/Loss.h"
#include "framework/train/Evaluation.h"
#include "framework/train/Plot.h"
#include "framework/train/Preflight.h"
#include "framework/train/RunDirectory.h"
#include "framework/train/TrainerState.h"
#include "models/Weights.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>

namespace aps::train {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

// Element-wise sums over every rank, in rank order: local[i] is local rank i's vector. Real
// and simulated worlds take the same path (an all-gather through the transport).
template <typename T>
std::vector<T> Trainer::State::sumOverRanks(const std::vector<std::vector<T>>& local) {
  APS_CHECK(local.size() == static_cast<size_t>(localRanks), "evaluation: {} local sums for {} local ranks",
            local.size(), localRanks);
  const size_t n = local[0].size();
  std::vector<const void*> mine;
  for (const auto& v : local) {
    APS_CHECK(v.size() == n, "evaluation: local sums of {} and {} values", n, v.size());
    mine.push_back(v.data());
  }
  std::vector<T> all(n * static_cast<size_t>(world));
  comm::allGatherBytes(*transport, mine, n * sizeof(T), all.data());
  std::vector<T> sum(n, T{0});
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const T v = all[static_cast<size_t>(r) * n + i];
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
  for (auto& b : model->namedBuffers()) {
    // The transport sends host bytes: a buffer on a GPU goes through a host copy (on the CPU,
    // to() gives the buffer itself).
    Tensor host = b.tensor.to(Device::cpu());
    comm::broadcastFromRankZero(*transport, host.rawData(), host.buffer().bytes());
    if (!b.tensor.device().isCpu()) b.tensor.copyFrom(host);
  }
}

// One local rank's forward and backward on its batch (micro-batch `micro` of the step);
// backward's gradient-ready hooks hand the (loss-scaled) gradients to the reducer, whose
// buckets reduce while backward runs. With optimizer.accumulation_steps = K, the first K - 1
// micro-batches' gradients are held in .grad, summed, and the last one's hooks hand the sum
// over; each backward starts from scale / K, so the sum is the mean over the K micro-batches.
float Trainer::State::rankForwardBackward(nn::Module& net, const std::vector<nn::Dropout*>& rankDropouts, int copy,
                                          int local, const data::Batch& batch, int64_t micro) {
  const int64_t accumulation = config.optimizer.accumulationSteps;
  for (GradientSync* each : allSyncs()) {
    each->setLocalRank(local, copy);
    each->holdGradients(micro + 1 < accumulation, copy);
  }
  // The split layers' exchanges: their random streams, and rank 0's bytes and errors counted.
  if (mp) mp->setPosition(static_cast<uint64_t>(globalStep * accumulation + micro), firstRank + local, true);
  // Dropout masks depend on (step, micro-batch, rank) only: the same under sim and mpi, and on resume.
  for (nn::Dropout* d : rankDropouts)
    d->setNextStream(static_cast<uint64_t>((globalStep * accumulation + micro) * world + firstRank + local));
  Tensor images, labels;
  if (deviceBatches) {
    std::tie(images, labels) = deviceBatches->take(local);
  } else {
    images = Tensor::fromVector(std::span<const float>(batch.images), batch.imageShape);
    labels = Tensor::fromVector(std::span<const int64_t>(batch.labels), batch.labelShape);
  }
  autograd::ComputePrecisionGuard precisionGuard(compute);
  const Tensor logits = net.forward(images);
  const Tensor loss = ops::crossEntropy(
      logits, labels, {static_cast<float>(config.loss.labelSmoothing), info.segmentation ? 255 : -100});
  const float value = loss.item();
  Tensor root = lossScaler ? lossScaler->rootGradient() : Tensor();
  if (accumulation > 1)
    root = Tensor::scalar((lossScaler ? lossScaler->scale() : 1.0f) / static_cast<float>(accumulation));
  autograd::backward(loss, root);
  return value;
}

// Every local rank's forward and backward on its batches (micro[m][local]: micro-batch m of
// local rank `local`; one micro-batch without accumulation). Returns each local rank's loss,
// the mean over its micro-batches.
// One at a time on all threads, or (comm.sim_workers) on C model copies at once, one thread
// each: copy c computes local ranks c, c + C, ... in order. No kernel's bits depend on the
// thread count, and each rank starts from the same weights and zeroed gradients, so both ways
// compute the same bits.
std::vector<float> Trainer::State::forwardBackward(const std::vector<std::vector<data::Batch>>& micro) {
  std::vector<float> losses(static_cast<size_t>(localRanks));
  NamedTensors rankZeroBuffers;
  const auto copiesInAll = static_cast<int>(copies.size()) + 1;
  // The ranks of one copy, in order; after rank 0 its batch-norm statistics are kept.
  auto runCopy = [&](int c) {
    nn::Module& net = c == 0 ? *model : *copies[static_cast<size_t>(c - 1)].model;
    const auto& rankDropouts = c == 0 ? dropouts : copies[static_cast<size_t>(c - 1)].dropouts;
    for (int local = c; local < localRanks; local += copiesInAll) {
      if (local != c) net.zeroGradBeforeBackward();
      float sum = 0;
      for (size_t m = 0; m < micro.size(); ++m) {
        // Accumulating on a GPU: each micro-batch is copied when its turn comes.
        const bool stageNow = deviceBatches && micro.size() > 1;
        if (stageNow) deviceBatches->stage(micro[m]);
        sum += rankForwardBackward(net, rankDropouts, c, local, micro[m][static_cast<size_t>(local)],
                                   static_cast<int64_t>(m));
        if (stageNow) deviceBatches->release();
      }
      losses[static_cast<size_t>(local)] = sum / static_cast<float>(micro.size());
      if (local == 0 && localRanks > 1) {
        for (const auto& b : net.namedBuffers()) rankZeroBuffers.push_back({b.name, b.tensor.clone()});
      }
    }
  };
  if (copiesInAll == 1) {
    runCopy(0);
  } else {
    {
      // The copies start from the model's weights and batch-norm statistics.
      autograd::NoGradGuard noGrad;
      const NamedTensors state = model->stateDict();
      for (ModelCopy& copy : copies) {
        copy.model->loadStateDict(state);
        copy.model->zeroGrad();
      }
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(copiesInAll));
    auto worker = [&](int c) {
      try {
        ThreadCountGuard oneThread(1);
        runCopy(c);
      } catch (...) {
        errors[static_cast<size_t>(c)] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (int c = 1; c < copiesInAll; ++c) threads.emplace_back(worker, c);
    worker(0);
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  // Simulated ranks share one model: keep rank 0's batch-norm statistics, as mpi does.
  if (localRanks > 1) {
    auto buffers = model->namedBuffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].tensor.copyFrom(rankZeroBuffers[i].tensor);
  }
  return losses;
}

// Every sync's reduced gradients in place (the replicated parameters', then each slice's), and
// their figures together. Model parallelism: a non-finite gradient of any slice skips the step
// on every rank of the model-parallel group alike.
comm::StepCommStats Trainer::State::finishSteps() {
  comm::StepCommStats all = sync->finishStep();
  if (!mp) return all;
  for (const auto& slice : sliceSyncs) {
    const comm::StepCommStats c = slice->finishStep();
    all.exposedSeconds += c.exposedSeconds;
    all.commSeconds += c.commSeconds;
    all.nonFinite = all.nonFinite || c.nonFinite;
    all.buckets += c.buckets;
    // Rank 0 sends slice 0's buckets (the simulator's other slices stand for other ranks).
    if (&slice == &sliceSyncs.front()) {
      all.bytesSent.resize(std::max(all.bytesSent.size(), c.bytesSent.size()), 0);
      for (size_t i = 0; i < c.bytesSent.size(); ++i) all.bytesSent[i] += c.bytesSent[i];
    }
  }
  std::vector<float> flag(static_cast<size_t>(modelGroup->localRankCount()), all.nonFinite ? 1.0f : 0.0f);
  std::vector<float*> perRank;
  for (float& f : flag) perRank.push_back(&f);
  comm::smallAllReduce(*modelGroup, perRank, 1, comm::ReduceOp::Max);
  all.nonFinite = flag[0] != 0.0f;
  return all;
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
  // On a GPU the reduced gradients are in the reducer's host copies: unscaled there (the CPU's
  // arithmetic), then copied to the device parameters' .grad for the optimizer.
  const NamedTensors& reduced = hostParams.empty() ? params : hostParams;
  bool finite = gradientsFinite;
  if (lossScaler) {
    const bool unscaledFinite = lossScaler->unscaleGradients(reduced, compute.parameterFormat());
    finite = lossScaler->update(finite && unscaledFinite);
  }
  if (finite) {
    clipGradients(reduced);
    for (size_t i = 0; i < hostParams.size(); ++i) {
      Tensor grad = params[i].tensor.grad();
      grad.copyFrom(hostParams[i].tensor.grad());
    }
    scheduler->apply();
    autograd::NoGradGuard noGrad;
    optimizer->step();
    lastStepDiverged = false;
    return true;
  }
  // With loss scaling an overflow is routine (the scale backs off): `stop` then fires only
  // when the loss itself is not finite or the scale cannot back off any further.
  const bool diverged =
      !lossScaler || !std::isfinite(loss) || lossScaler->state().scale <= lossScaler->options().minScale;
  lastStepDiverged = diverged;  // a run that ends here has diverged (a single bad step it recovers from has not)
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

// optimizer.clip_grad_value, then clip_grad_norm, on the reduced gradients: the same on every
// rank, which all hold the same reduced gradients. Gradients reduced on a GPU (comm.backend:
// nccl, or sim on a GPU) are clipped on host copies, with the CPU's arithmetic, and copied back.
void Trainer::State::clipGradients(const NamedTensors& grads) {
  if (config.optimizer.clipGradValue <= 0 && config.optimizer.clipGradNorm <= 0) return;
  const bool onDevice = !grads.empty() && !grads.front().tensor.device().isCpu();
  NamedTensors host;
  for (const auto& p : grads) {
    if (!onDevice) break;
    Tensor copy = Tensor::zeros(p.tensor.sizes());
    copy.setGrad(p.tensor.grad().to(Device::cpu()));
    host.push_back({p.name, copy});
  }
  const NamedTensors& clipped = onDevice ? host : grads;
  if (config.optimizer.clipGradValue > 0) optim::clipGradValue(clipped, config.optimizer.clipGradValue);
  if (config.optimizer.clipGradNorm > 0) lastGradNorm = optim::clipGradNorm(clipped, config.optimizer.clipGradNorm);
  for (size_t i = 0; i < host.size(); ++i) {
    Tensor grad = grads[i].tensor.grad();
    grad.copyFrom(host[i].tensor.grad());
  }
}

// One optimizer step of every local rank, top to bottom.
bool Trainer::State::trainStep(std::vector<std::vector<data::Batch>>& micro, IntervalStats& interval) {
  const auto start = Clock::now();
  faults.beforeStep(firstRank, localRanks, globalStep);
  std::vector<float> losses = forwardBackward(micro);
  // Every kernel that reads this step's batches is queued (accumulation released each micro-batch's).
  if (deviceBatches && micro.size() == 1) deviceBatches->release();
  const double computeSeconds = secondsSince(start);
  const comm::StepCommStats comm = finishSteps();  // the reduced, averaged gradients are in place
  const double loss = meanLossOverRanks(std::move(losses));
  if (!std::isfinite(loss)) trainLossNonFinite = true;
  const bool stepped = update(!comm.nonFinite, loss);
  scheduler->advance();
  broadcastBuffersFromRankZero();
  model->zeroGrad();
  for (GradientSync* each : allSyncs()) each->adaptFormats(globalStep);
  if (mp) mpBytes += mp->takeBytesSent();

  interval.steps += 1;
  for (const auto& batches : micro) interval.images += static_cast<int64_t>(batches[0].size()) * world;
  interval.loss += loss;
  interval.compute += computeSeconds;
  interval.comm += comm.commSeconds;
  interval.exposed += comm.exposedSeconds;
  // What rank 0 sent (ranks differ by a few bytes where chunks are uneven): the same figure
  // under sim and mpi, whose metrics rank 0 writes.
  if (!comm.bytesSent.empty() && firstRank == 0) interval.bytes = std::max(interval.bytes, comm.bytesSent[0]);
  return stepped;
}

// A record of the replicated parameters' sync, then slice 0's (what rank 0 reduces).
template <class Record>
nlohmann::json Trainer::State::withSliceZero(Record record) const {
  nlohmann::json out = ((*sync).*record)();
  if (!sliceSyncs.empty()) {
    for (const auto& entry : ((*sliceSyncs.front()).*record)()) out.push_back(entry);
  }
  return out;
}

nlohmann::json Trainer::State::layerRecords() const { return withSliceZero(&GradientSync::layerRecords); }
nlohmann::json Trainer::State::formatsRecord() const { return withSliceZero(&GradientSync::formatsRecord); }

void Trainer::State::logInterval(IntervalStats& interval) {
  nlohmann::json extra{{"skipped_steps", skipped},
                       {"autoscale", sync->autoscaleRecord()},
                       {"loss_scale", lossScaler ? lossScaler->scale() : 1.0f},
                       {"layers", layerRecords()}};
  if (mp) {
    extra["mp_bytes"] = interval.steps > 0 ? mpBytes / static_cast<uint64_t>(interval.steps) : 0;
    extra["mp_layers"] = mp->layerRecords();
    mpBytes = 0;
  }
  if (config.optimizer.clipGradNorm > 0) extra["grad_norm"] = metricValue(lastGradNorm);
  log->interval(interval, position(), optimizer->lr(), std::move(extra));
}

void Trainer::State::trainEpoch() {
  auto shards = sampler->shards(firstRank, localRanks, static_cast<uint64_t>(epoch));
  for (int i = 0; i < localRanks; ++i) {
    auto& indices = shards[static_cast<size_t>(i)];
    // Resuming mid-epoch: skip the batches already trained (sample augmentation depends only
    // on (seed, epoch, sample), so the rest of the epoch is unchanged).
    indices.erase(indices.begin(), indices.begin() + std::min<int64_t>(static_cast<int64_t>(indices.size()),
                                                                       batchInEpoch * stepBatch()));
    loaders[static_cast<size_t>(i)]->startEpoch(static_cast<uint64_t>(epoch), std::move(indices));
  }
  if (deviceBatches) deviceBatches->discardStaged();  // none is left by a finished epoch
  const int64_t accumulation = config.optimizer.accumulationSteps;
  // micro[m]: every local rank's m-th micro-batch of the step (one without accumulation).
  std::vector<std::vector<data::Batch>> micro(static_cast<size_t>(accumulation),
                                              std::vector<data::Batch>(static_cast<size_t>(localRanks)));
  std::vector<data::Batch>& batches = micro[0];
  std::vector<data::Batch> ahead(batches.size());
  IntervalStats interval;
  // Each local rank's next batch (micro-batch m of the `stepsAhead`-th step after this one), its
  // wait for the loader counted.
  auto fetch = [&](std::vector<data::Batch>& into, int64_t stepsAhead, int64_t m = 0) {
    for (int i = 0; i < localRanks; ++i) {
      const double waitedBefore = loaders[static_cast<size_t>(i)]->stats().waitSeconds;
      APS_CHECK(loaders[static_cast<size_t>(i)]->next(into[static_cast<size_t>(i)]),
                "rank {}: the data shard ended after {} of {} batches", firstRank + i,
                (batchInEpoch + stepsAhead) * accumulation + m, stepsPerEpoch * accumulation);
      interval.dataWait += loaders[static_cast<size_t>(i)]->stats().waitSeconds - waitedBefore;
    }
  };
  while (batchInEpoch < stepsPerEpoch && globalStep < totalSteps) {
    const auto start = Clock::now();
    if (accumulation > 1) {
      for (int64_t m = 0; m < accumulation; ++m) fetch(micro[static_cast<size_t>(m)], 0, m);
    } else if (deviceBatches && deviceBatches->staged()) {
      std::swap(batches, ahead);  // staged during the last step
    } else {
      fetch(batches, 0);
      if (deviceBatches) deviceBatches->stage(batches);
    }
    // On a GPU the next step's batches are copied while this step computes.
    if (deviceBatches && accumulation == 1 && batchInEpoch + 1 < stepsPerEpoch && globalStep + 1 < totalSteps) {
      fetch(ahead, 1);
      deviceBatches->stage(ahead);
    }
    trainStep(micro, interval);
    ++batchInEpoch;
    ++globalStep;
    const double stepSeconds = secondsSince(start);
    interval.seconds += stepSeconds;
    log->progress(position(), stepSeconds, stepBatch() * world);
    if (globalStep % config.logging.interval == 0) logInterval(interval);
    if (stepCheckpointDue() && batchInEpoch < stepsPerEpoch) save();  // checkpoint.interval_steps
    if (preemption != nullptr && (preemptedBy = preemption->agreedSignal(*transport)) != 0) break;
  }
  logInterval(interval);
}

bool Trainer::State::stepCheckpointDue() const {
  const int64_t k = config.checkpoint.intervalSteps;
  return k > 0 && globalStep % k == 0 && globalStep < totalSteps;
}

// An epoch (or the rest of one), then its evaluation and checkpoint. False when training stops
// inside it: max_steps reached, or a preemption signal (then without the evaluation).
bool Trainer::State::trainAndCheckpointEpoch() {
  trainEpoch();
  const bool preempted = preemptedBy != 0;
  if (batchInEpoch < stepsPerEpoch) {  // stopped inside the epoch
    save();
    return false;
  }
  ++epoch;
  batchInEpoch = 0;
  const bool last = globalStep >= totalSteps;
  const int64_t evalInterval = config.evalIntervalEpochs;
  if (!last && !preempted && evalInterval > 0 && epoch % evalInterval == 0) {
    const TrainSummary summary = evaluate(validationSet != nullptr);
    report(summary, "eval", validationSet ? nlohmann::json{{"split", "validation"}} : nlohmann::json::object());
    watchEvaluation(summary);
  }
  const bool stopping = earlyStopDue();
  if (last || preempted || stopping || epoch % config.checkpoint.intervalEpochs == 0 ||
      (config.checkpoint.intervalSteps > 0 && globalStep % config.checkpoint.intervalSteps == 0)) {
    save();
  }
  return !preempted && !stopping;
}

// After an evaluation during training: the monitor's verdict, best.safetensors when it
// improved (checkpoint.keep_best), and the early stop when it has not for long enough.
void Trainer::State::watchEvaluation(const TrainSummary& summary) {
  if (!monitor) return;
  const bool improved = monitor->observe(summary, globalStep);
  const std::string& metric = monitor->metric();
  if (improved) {
    log->write({{"type", "best"}, {"epoch", epoch}, {"step", globalStep}, {"metric", metric},
                {"value", metricValue(monitor->best())}});
    if (config.checkpoint.keepBest && !config.checkpoint.dir.empty()) {
      const NamedTensors weights = wholeState(model->stateDict());  // collective with split layers
      if (isRoot()) {
        std::filesystem::create_directories(config.checkpoint.dir);
        const std::string path = (std::filesystem::path(config.checkpoint.dir) / "best.safetensors").string();
        models::saveWeights(weights, path);
        spdlog::info("best {} so far ({}): weights in {}", metric, monitor->best(), path);
      }
    }
  } else if (config.eval.earlyStopping > 0) {
    spdlog::info("{} has not improved on {} (step {}) for {} of {} evaluations", metric, monitor->best(),
                 monitor->bestStep(), monitor->stale(), config.eval.earlyStopping);
  }
  if (earlyStopDue()) {
    earlyStopped = true;
    spdlog::info("early stopping after step {}: {} has not improved for {} evaluations (best {} at step {})",
                 globalStep, metric, monitor->stale(), monitor->best(), monitor->bestStep());
  }
}

bool Trainer::State::earlyStopDue() const {
  return monitor && config.eval.earlyStopping > 0 && monitor->stale() >= config.eval.earlyStopping;
}

// A preempted run: its checkpoint is written; no final evaluation (the job is about to be killed).
TrainSummary Trainer::State::preempted(double seconds) {
  TrainSummary summary;
  summary.steps = globalStep;
  summary.skippedSteps = skipped;
  summary.seconds = seconds;
  summary.preemptedBy = preemptedBy;
  log->write({{"type", "preempted"}, {"step", globalStep}, {"signal", preemptedBy}});
  spdlog::warn("preempted by signal {} after step {}: checkpoint in {}; continue with --resume auto", preemptedBy,
               globalStep, config.checkpoint.dir.empty() ? "(none: no checkpoint.dir)" : config.checkpoint.dir);
  return summary;
}

// --resume auto looks in a folder this run names; a folder named by the time is new every run.
void Trainer::State::checkAutoResume(const std::string& resumeArgument) const {
  const bool named = (!config.outputDir.empty() && config.outputDir != "none") || !config.checkpoint.dir.empty();
  APS_CHECK(resumeArgument != "auto" || named,
            "--resume auto needs output_dir (or checkpoint.dir) in the config: without one every run gets a new "
            "runs/<config name>-<time> folder, which holds no checkpoint to resume");
}

// --resume auto: the newest valid checkpoint of the run's checkpoint folder, or a fresh start.
std::string Trainer::State::resolveResume(const std::string& resumeFrom) {
  if (resumeFrom != "auto") return resumeFrom;
  const std::string path = RunDirectory::newestCheckpoint(config, *transport);
  spdlog::info("--resume auto: {}", path.empty() ? "no checkpoint yet, starting afresh" : "resuming " + path);
  return path;
}

// Every rank, real or simulated, evaluates its shard of the test set (same bits both ways).
TrainSummary Trainer::State::evaluate(bool validation) {
  // Evaluation's exchanges: fixed random streams (every rank alike), nothing counted.
  if (mp) mp->setPosition(0, 0, false);
  EvalSetup setup;
  setup.classes = config.model.numClasses;
  setup.segmentation = info.segmentation;
  setup.samples = validation ? 0 : config.data.testSamples;
  setup.shards = world;
  setup.firstShard = firstRank;
  setup.localShards = localRanks;
  setup.batchSize = config.data.testBatchSize;
  setup.workers = static_cast<int>(std::max<int64_t>(config.data.workers, 1));
  setup.prefetch = static_cast<int>(config.data.prefetch);
  setup.seed = config.seed;
  setup.compute = compute;
  setup.sumCounts = [this](const std::vector<std::vector<int64_t>>& v) { return sumOverRanks(v); };
  setup.sumDoubles = [this](const std::vector<std::vector<double>>& v) { return sumOverRanks(v); };
  return train::evaluate(*model, validation ? validationSet : testSet, setup);
}

void Trainer::State::report(const TrainSummary& summary, const char* type, nlohmann::json extra) {
  if (std::string_view(type) == "final" && config.precision.probeInterval > 0) {
    const nlohmann::json probe = sync->probeSummary();
    extra["probe"] = probe;
    spdlog::info("fidelity probe over {} steps: median rel_error {}, median cosine {}", probe["steps"].dump(),
                 probe["median_rel_error"].dump(), probe["median_cosine"].dump());
  }
  if (std::string_view(type) == "final" && monitor && monitor->seen()) {
    extra["best"] = {{"metric", monitor->metric()}, {"value", metricValue(monitor->best())},
                     {"step", monitor->bestStep()}};
    extra["early_stopped"] = earlyStopped;
  }
  log->evaluation(summary, type, position(), skipped, std::move(extra));
}

// The checkpoint's "precision" section: the wire precision's state (GradientSync) and the
// loss scaler's, in the order earlier versions wrote it.

Trainer::Trainer(TrainConfig config, std::shared_ptr<comm::Communicator> communicator) : s_(std::make_unique<State>()) {
  s_->config = std::move(config);
  s_->setupWorld(std::move(communicator));
  s_->checkSameConfig();
  s_->setupModel();
}

Trainer::~Trainer() = default;

// What run() and dryRun() share: the run directory (a dry run only names it and writes
// nothing), the checkpoint to resume (restored: a dry run reads and checks everything on a
// throwaway copy of the state), data, optimizer, wire precision, and the output folders' checks.
// Returns the checkpoint resumed ("" for a fresh start).
std::string Trainer::State::prepare(const std::string& resumeArgument, bool dryRun) {
  checkAutoResume(resumeArgument);
  const RunDirectory runDir = RunDirectory::resolve(config, *transport, !dryRun);
  if (dryRun && !runDir.dir.empty()) spdlog::info("dry run: the run directory would be {}", runDir.dir);
  if (!dryRun && isRoot()) runDir.writeConfigAndOpenLog(config);
  const std::string resumeFrom = resolveResume(resumeArgument);
  if (!resumeFrom.empty()) {
    resumed = std::make_unique<Checkpoint>(loadCheckpoint(resumeFrom));
    adaptToCheckpointWorld(resumeFrom);
  }
  setupData();
  setupOptimizer();
  setupPrecisionAndComm();
  claimCheckpointDir(config, !resumeFrom.empty(), !dryRun, isRoot());
  if (isRoot()) checkOutputsWritable(config, !dryRun);
  if (!resumeFrom.empty()) restore(resumeFrom);
  return resumeFrom;
}

void Trainer::dryRun(const std::string& resumeArgument) {
  s_->prepare(resumeArgument, true);
  spdlog::info("dry run: model {} ({} parameter tensors), {} training samples, {} steps per epoch, {} ranks",
               s_->config.model.name, s_->params.size(), s_->trainSet->size(), s_->stepsPerEpoch, s_->world);
}

TrainSummary Trainer::evaluateOnly(const std::string& resumeArgument) {
  State& s = *s_;
  APS_CHECK(!resumeArgument.empty() || !s.config.model.initFrom.empty(),
            "--eval-only evaluates trained weights: give --resume CHECKPOINT (or auto), or model.init_from FILE "
            "(for example a run's checkpoints/best.safetensors)");
  const std::string resumeFrom = s.prepare(resumeArgument, false);
  APS_CHECK(!resumeFrom.empty() || !s.config.model.initFrom.empty(),
            "--eval-only --resume auto: no checkpoint in the run directory to evaluate");
  s.log->openMetrics(s.config.logging.metricsFile, true);
  s.log->openTensorBoard(s.config.logging.tensorboardDir);
  const auto start = Clock::now();
  TrainSummary summary = s.evaluate();
  summary.steps = s.globalStep;
  summary.skippedSteps = s.skipped;
  summary.seconds = secondsSince(start);
  s.report(summary, "final", {{"eval_only", true}});
  return summary;
}

NamedTensors Trainer::modelState() const {
  return onDevice(s_->wholeState(s_->model->stateDict()), Device::cpu());
}

TrainSummary Trainer::run(const std::string& resumeArgument) {
  State& s = *s_;
  const std::string resumeFrom = s.prepare(resumeArgument, false);
  s.log->openMetrics(s.config.logging.metricsFile, !resumeFrom.empty());
  s.log->openTensorBoard(s.config.logging.tensorboardDir);
  s.log->write({{"type", "formats"}, {"step", s.globalStep}, {"layers", s.formatsRecord()}});
  const int64_t accumulation = s.config.optimizer.accumulationSteps;
  spdlog::info("training {} on {} ({} ranks x batch {}{}, {} steps per epoch, {} steps)", s.config.model.name,
               s.config.data.dataset, s.world, s.config.data.batchSize,
               accumulation > 1 ? fmt::format(" x {} accumulated", accumulation) : std::string(), s.stepsPerEpoch,
               s.totalSteps);
  const auto start = Clock::now();
  const PreemptionWatch watch;
  s.preemption = &watch;
  if (s.earlyStopDue()) spdlog::info("the checkpoint's run stopped early: evaluating only");
  while (s.globalStep < s.totalSteps && !s.earlyStopDue() && s.trainAndCheckpointEpoch()) {
  }
  s.preemption = nullptr;
  if (s.preemptedBy != 0) return s.preempted(secondsSince(start));
  TrainSummary summary = s.evaluate();
  summary.steps = s.globalStep;
  summary.skippedSteps = s.skipped;
  summary.seconds = secondsSince(start);
  summary.diverged = summary.diverged || s.trainLossNonFinite || s.lastStepDiverged;
  summary.earlyStopped = s.earlyStopped;
  s.report(summary, "final");
  if (!s.config.checkpoint.dir.empty()) {
    const NamedTensors weights = s.wholeState(s.model->stateDict());  // collective with split layers
    if (s.isRoot()) {
      const std::string path = (std::filesystem::path(s.config.checkpoint.dir) / "final.safetensors").string();
      models::saveWeights(weights, path);
      spdlog::info("final weights {}", path);
    }
  }
  // End of run: the picture beside the metrics file, <folder>/<stem>.png (aps_plot; failing
  // only warns).
  if (s.isRoot() && !s.config.logging.metricsFile.empty()) {
    plotRun(s.config.logging.metricsFile, plotPathFor(s.config.logging.metricsFile));
  }
  return summary;
}

}  // namespace aps::train
