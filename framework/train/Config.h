#pragma once

#include "framework/autograd/ComputePrecision.h"
#include "framework/core/EnumNames.h"
#include "framework/numerics/RoundingMode.h"
#include "precision/ApsScaler.h"
#include "precision/CodecSpec.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace aps::train {

// comm.algorithm: the flat schedules of comm/ (AllReduceKind), and hierarchical: two_shot within
// groups of comm.group_size ranks, then across the groups' leaders (GradientSync).
enum class CommAlgorithm : uint8_t { Ring, TwoShot, Allgather, Native, Hierarchical };
inline constexpr EnumNames<CommAlgorithm, 5> kCommAlgorithmNames{
    {"ring", "two_shot", "allgather", "native", "hierarchical"}};
static_assert(kCommAlgorithmNames.covers(CommAlgorithm::Hierarchical), "one name per CommAlgorithm");
inline std::string_view commAlgorithmName(CommAlgorithm a) { return kCommAlgorithmNames.name(a); }

// A wire format as the config names it, parsed when the config loads: a preset name, a
// "format:rounding" string or a map. Float formats that name no rounding of their own take
// precision.rounding (applied once every key is read).
struct WireFormatChoice {
  precision::CodecSpec spec;
  bool ownRounding = false;
};

// The fully resolved aps_train configuration: the user's YAML, then --set overrides, checked
// against the schema (framework/train/ConfigSchema.h) with every default filled in.
struct TrainConfig {
  struct Model {
    std::string name;
    int64_t numClasses = 0, inChannels = 0;
    std::vector<int64_t> widths;    // mlp: input features, then the hidden layers' widths
    std::string initFrom, initMap;  // initial weights (safetensors) and their key renames
  };
  struct Data {
    std::string dataset, path;
    int64_t batchSize = 0, testBatchSize = 0, workers = 0, prefetch = 0, trainSamples = 0, testSamples = 0,
            maxImagePixels = 0;
    int64_t validationSamples = 0;  // held out of the training set for the evaluations during training
    int64_t canvas = 0, maxItems = 0;  // fashion_mnist_seg: canvas side and items per canvas
    bool augment = false;
  };
  struct Optimizer {
    std::string name;
    double lr = 0, momentum = 0, weightDecay = 0, larsTrust = 0, beta1 = 0, beta2 = 0, eps = 0;
    double clipGradNorm = 0, clipGradValue = 0;  // on the reduced gradients; 0: off
    int64_t accumulationSteps = 1;                // micro-batches of data.batch_size per optimizer step
    bool excludeBiasAndNorm = false;
  };
  struct Loss {
    double labelSmoothing = 0;
  };
  struct Schedule {
    std::string name;
    double warmupEpochs = 0, warmupStartLr = 0, gamma = 0, power = 0, minLr = 0;
    int64_t stepEpochs = 0, baseBatch = 0;
    std::vector<int64_t> milestones;
    bool scaleWithBatch = false;
  };
  struct HybridRule {
    std::string pattern;
    WireFormatChoice format;
  };
  struct Precision {
    autograd::ComputePrecision compute;
    precision::RoundingMode rounding = precision::RoundingMode::NearestEven;
    precision::ScalingMode scaling = precision::ScalingMode::None;
    std::string nonfinite;
    WireFormatChoice format;
    std::vector<HybridRule> hybrid;
    bool hybridAuto = false, errorFeedback = false, kahan = false;
    bool preDivide = false;          // divide gradients by the world size before quantising (the APS artifact)
    bool autoscalePerTensor = true;  // autoscale: FP8-LM's per-tensor amax scale and 1/sqrt(N), not mu alone
    double hybridUnderflow = 0, hybridSaturation = 0;  // hybrid_auto's thresholds
    std::string lossScaling;                           // 16-bit compute: dynamic, static, none
    double lossScale = 0;                              // its initial (or fixed) scale
    bool stochasticUpdate = false;                     // pure modes: stochastic rounding of weights
    int64_t statsWindow = 0;
    int64_t probeInterval = 0;  // fidelity probe every K steps (0: off)
    int64_t blockSize = 32;
  };
  struct Comm {
    std::string backend;
    CommAlgorithm algorithm = CommAlgorithm::TwoShot;
    int64_t worldSize = 1;
    int64_t groupSize = 0;   // comm.algorithm hierarchical: ranks per group (0: not given)
    int64_t simWorkers = 0;  // comm.sim_workers: simulated ranks computed at once (0: auto)
    double bucketMb = 0;
    bool overlap = true;
  };
  // Model parallelism (docs/ALGORITHMS.md, Model parallelism): the parallel.split layers are
  // split by output features over the M ranks of each data-parallel group.
  struct Parallel {
    int64_t modelParallel = 1;
    std::vector<std::string> split;  // name globs of the linear layers split
    WireFormatChoice activationFormat;  // what activations and errors travel in
    std::string activationScaling;   // aps or none
  };
  struct Checkpoint {
    std::string dir;
    int64_t intervalEpochs = 0, intervalSteps = 0, keep = 0;
    bool overwrite = false;  // a fresh run may replace another run's checkpoints in `dir`
    bool keepBest = false;   // best.safetensors: the weights of the best evaluation by eval.monitor
    std::string worldChange;  // a resume on another world size: refuse, keep_global_batch, keep_rank_batch
  };
  struct Eval {
    std::string monitor;  // the metric keep_best and early stopping watch (auto: top1 or miou)
    double minDelta = 0;  // an improvement smaller than this is none
    int64_t earlyStopping = 0;  // stop after this many evaluations without improvement (0: never)
  };
  struct Logging {
    int64_t interval = 0;
    std::string metricsFile, level;
    std::string tensorboardDir;  // TensorBoard event files ('' without a run directory, or none: off)
    bool allRanks = false, progress = true;
  };

  uint64_t seed = 0;
  int64_t threads = 0, epochs = 0, maxSteps = 0, evalIntervalEpochs = 0;
  std::string device;
  struct Cuda {
    bool allowTf32 = true, deterministic = false;
  };
  Cuda cuda;
  std::string outputDir;  // '' : runs/<config name>-<time>; "none": no run directory
  Model model;
  Data data;
  Optimizer optimizer;
  Loss loss;
  Schedule schedule;
  Precision precision;
  Comm comm;
  Parallel parallel;
  Checkpoint checkpoint;
  Eval eval;
  Logging logging;

  YAML::Node resolved;     // the resolved tree (for --print-config and checkpoints)
  std::string sourceFile;  // where it came from ("" for a string)
};

// The multi-process launcher this process runs under, if any: Open MPI's mpirun
// (OMPI_COMM_WORLD_SIZE), Slurm's srun (SLURM_STEP_NUM_TASKS: a job step's tasks, not the
// batch script's), or another PMI launcher such as MPICH's mpiexec (PMI_SIZE).
struct Launcher {
  int processes = 1;  // 1: not launched as one of several processes
  std::string name;   // "mpirun (Open MPI)", "a PMI launcher (PMI_SIZE)"
};
Launcher detectLauncher();

// Loads `path`, applies overrides ("key.path=value", value in YAML syntax) and validates.
// Unknown keys, wrong types and out-of-range values throw aps::Error naming the file, line
// and key, with a "did you mean" hint for near misses. A config may name `base: FILE` (or a
// list, merged left to right; paths relative to its folder; bases may have bases): its keys
// are merged over them, section by section, before the overrides.
// Under a multi-process launcher (detectLauncher()) every process is a rank: the file's
// comm.backend and comm.world_size give way to it (backend mpi, or the file's nccl; world size
// the launcher's), so `mpirun -np 2 aps_train --config X` trains as 2 real ranks with a config
// written for the simulator. Only --set can still ask for sim there, and sim with more than one
// rank per process is refused, naming the --set and the launcher (each process would run the
// whole simulated job on its own, into the same run folder).
TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from YAML text; `name` stands in for the file name in messages (and its folder
// for the bases). `launcher` as loadConfig's (default: a single process).
TrainConfig parseConfig(const std::string& yamlText, const std::string& name,
                        const std::vector<std::string>& overrides = {}, const Launcher& launcher = {});

// The resolved configuration as YAML, every key present, in schema order.
std::string configToYaml(const TrainConfig& config);

// A stable 64-bit hash of the resolved configuration (FNV-1a of configToYaml): every rank
// compares it so that a job never runs with ranks on different configs.
uint64_t configHash(const TrainConfig& config);

// The hash a checkpoint is tied to: configHash without the keys a resumed run may change
// (epochs, max_steps, checkpoint.*, logging.*, eval.*, data.workers, data.prefetch, threads),
// so a run can be extended or re-logged but never continued with another model, data,
// optimizer, precision or world.
uint64_t resumeHash(const TrainConfig& config);
// The YAML text resumeHash hashes (stored in every checkpoint).
std::string resumeYaml(const TrainConfig& config);
// The keys whose values differ between a checkpoint's resumeYaml and this run's, as
// "key: A in the checkpoint, B here". A key the checkpoint lacks (written by an older aps)
// counts only when this run sets it to something other than its default.
std::vector<std::string> configDifferences(const std::string& checkpointYaml, const std::string& runYaml);

}  // namespace aps::train
