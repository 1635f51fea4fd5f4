#pragma once

// The trainer's state, shared by Trainer.cpp (the loop) and TrainerSetup.cpp (building the
// pieces from the config, checkpoints). Private to framework/train.
#include "comm/Communicator.h"
#include "comm/SimTransport.h"
#include "data/DatasetRecipes.h"
#include "data/DistributedSampler.h"
#include "data/Loader.h"
#include "framework/autograd/ComputePrecision.h"
#include "framework/nn/Dropout.h"
#include "framework/optim/LrScheduler.h"
#include "framework/optim/Optimizer.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/DeviceBatches.h"
#include "framework/train/EvalMonitor.h"
#include "framework/train/FaultInjection.h"
#include "comm/SubTransport.h"
#include "framework/train/GradientSync.h"
#include "framework/train/ModelParallel.h"
#include "framework/train/Preemption.h"
#include "framework/train/Restore.h"
#include "framework/train/RunLog.h"
#include "framework/train/Trainer.h"
#include "models/ModelRegistry.h"
#include "precision/DynamicLossScaler.h"

#include <memory>
#include <string>
#include <vector>

namespace aps::train {

struct Trainer::State {
  TrainConfig config;
  std::shared_ptr<comm::Communicator> mpi;
  // comm.backend: nccl: the gradients' all-reduce between the GPUs, over device memory
  // (bootstrapped over `mpi`, which carries everything else: `transport` is `mpi`).
  std::unique_ptr<comm::Communicator> nccl;
  std::unique_ptr<comm::SimTransport> sim;
  // comm.backend: sim on a GPU: the simulated world whose messages are device memory, for the
  // gradients' all-reduce on the device (`sim` carries the small agreements in host memory).
  std::unique_ptr<comm::SimTransport> deviceSim;
  comm::Transport* transport = nullptr;
  int world = 1, firstRank = 0, localRanks = 1;
  // parallel.model_parallel = M > 1 (ModelParallel.h): the world of D x M ranks (rank d M + m)
  // is `worldTransport`; `transport`, world, firstRank and localRanks are then this process's
  // data-parallel group (the D ranks of model-parallel index m: the simulator runs group 0,
  // whose ranks stand for every group, as the groups compute alike), `modelGroup` the M ranks
  // of its data-parallel rank, and `mp` the split layers' exchanges over it.
  comm::Transport* worldTransport = nullptr;
  int mpRank = 0;
  std::unique_ptr<comm::SubTransport> dataGroup, modelGroup;
  std::shared_ptr<ModelParallelGroup> mp;
  std::vector<std::unique_ptr<comm::SubTransport>> sliceGroups;  // the simulator: slice s's data-parallel group
  uint64_t mpBytes = 0;                                           // activations and errors sent since the last log

  models::ModelInfo info;
  std::shared_ptr<nn::Module> model;
  NamedTensors params;
  // `device`: where the model trains. On a GPU with comm.backend nccl or sim the gradients are
  // reduced where they lie; with mpi the reducer works on a host copy of the gradients
  // (hostParams: the parameters' shapes, their .grad the reducer's buffers): each gradient goes
  // there as backward makes it, and the reduced gradients come back before the optimizer steps
  // on the device.
  Device device = Device::cpu();
  NamedTensors hostParams;
  std::unique_ptr<DeviceBatches> deviceBatches;  // on a GPU: the loader's batches, copied ahead
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;

  std::shared_ptr<const data::Dataset> trainSet, testSet;
  std::shared_ptr<const data::Dataset> validationSet;  // data.validation_samples (null: none)
  std::unique_ptr<data::DistributedSampler> sampler;
  std::vector<std::unique_ptr<data::Loader>> loaders;  // one per local rank
  int64_t stepsPerEpoch = 0, totalSteps = 0;

  std::vector<nn::Dropout*> dropouts;  // their masks depend on (step, rank) only
  // comm.sim_workers: further copies of the model, so that simulated ranks compute side by side
  // (copy c + 1 on worker thread c + 1; the model itself on this thread). Synchronised from the
  // model before every step.
  struct ModelCopy {
    std::shared_ptr<nn::Module> model;
    NamedTensors params;
    std::vector<nn::Dropout*> dropouts;
  };
  std::vector<ModelCopy> copies;
  autograd::ComputePrecision compute;                             // precision.compute
  std::unique_ptr<aps::precision::DynamicLossScaler> lossScaler;  // 16-bit compute only

  std::unique_ptr<GradientSync> sync;  // gradient precision on the wire
  // Model parallelism: the split layers' gradients, reduced over their slice's data-parallel
  // group (one per slice this process computes).
  std::vector<std::unique_ptr<GradientSync>> sliceSyncs;

  // --resume: the checkpoint, read once before the data is set up (its world may change the
  // per-rank batch), and what a resume on another world size changes (checkpoint.world_change).
  std::unique_ptr<Checkpoint> resumed;
  struct WorldChange {
    int64_t oldWorld = 0, oldGlobalBatch = 0;
    double lrScale = 1;
  };
  std::unique_ptr<WorldChange> worldChange;  // null: the checkpoint's world is this run's

  std::unique_ptr<EvalMonitor> monitor;  // eval.monitor: keep_best and early stopping
  bool earlyStopped = false;
  double lastGradNorm = 0;  // optimizer.clip_grad_norm: the last step's norm before clipping

  int64_t epoch = 0, batchInEpoch = 0, globalStep = 0, skipped = 0;
  bool trainLossNonFinite = false;              // some step's training loss was inf or NaN: the run diverged
  bool lastStepDiverged = false;                // the last step was skipped for gradients no loss scale explains
  std::unique_ptr<RunLog> log;                  // log lines, progress bar, metrics file
  const PreemptionWatch* preemption = nullptr;  // set while run() trains
  int preemptedBy = 0;                          // the signal every rank agreed to stop on
  const FaultInjection faults = FaultInjection::fromEnvironment();  // tests only; empty otherwise

  bool isRoot() const { return firstRank == 0 && mpRank == 0; }
  // Every sync: the replicated parameters' and each slice's.
  std::vector<GradientSync*> allSyncs() const;
  // The model's state (or the optimizer's) with every split layer whole: a collective over the
  // model-parallel group under mpi.
  NamedTensors wholeState(const NamedTensors& state) const { return mp ? joinSlices(state, *mp) : state; }
  void setupModelParallel();
  comm::StepCommStats finishSteps();
  // The replicated parameters' records, then slice 0's (what rank 0 reduces).
  nlohmann::json layerRecords() const;
  nlohmann::json formatsRecord() const;
  template <class Record>
  nlohmann::json withSliceZero(Record record) const;

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
  void adaptToCheckpointWorld(const std::string& path);
  void remapPosition(Checkpoint& c, const std::string& path) const;
  void save();
  std::string prepare(const std::string& resumeArgument, bool dryRun);
  void checkAutoResume(const std::string& resumeArgument) const;
  std::string resolveResume(const std::string& resumeFrom);
  bool trainAndCheckpointEpoch();
  TrainSummary preempted(double seconds);
  void trainEpoch();
  bool stepCheckpointDue() const;
  bool trainStep(std::vector<std::vector<data::Batch>>& micro, IntervalStats& interval);
  std::vector<float> forwardBackward(const std::vector<std::vector<data::Batch>>& micro);
  // One local rank's forward and backward on `model` (the model or a copy) and micro-batch
  // `micro` of the step; returns its loss.
  float rankForwardBackward(nn::Module& model, const std::vector<nn::Dropout*>& rankDropouts, int copy, int local,
                            const data::Batch& batch, int64_t micro);
  // Samples per rank per optimizer step: data.batch_size x optimizer.accumulation_steps.
  int64_t stepBatch() const { return config.data.batchSize * config.optimizer.accumulationSteps; }
  void setupModelCopies();
  double meanLossOverRanks(std::vector<float> losses);
  bool update(bool gradientsFinite, double loss);
  // On the test set, or (during training, with data.validation_samples) the validation split.
  TrainSummary evaluate(bool validation = false);
  void clipGradients(const NamedTensors& grads);
  void watchEvaluation(const TrainSummary& summary);
  bool earlyStopDue() const;
  RunPosition position() const { return {epoch, globalStep, totalSteps, stepsPerEpoch}; }
  void logInterval(IntervalStats& interval);
  void report(const TrainSummary& summary, const char* type, nlohmann::json extra = nlohmann::json::object());
  void broadcastBuffersFromRankZero();
  template <typename T>
  std::vector<T> sumOverRanks(const std::vector<std::vector<T>>& local);
};

}  // namespace aps::train
