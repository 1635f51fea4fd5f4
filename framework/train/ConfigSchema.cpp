#include "framework/train/ConfigSchema.h"

#include "data/FashionMnistSegmentation.h"
#include "framework/core/EnumNames.h"
#include "framework/core/Error.h"
#include "framework/core/Suggest.h"
#include "models/ModelRegistry.h"
#include "precision/CodecSpec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace aps::train {

namespace {

using K = ValueKind;

// Stores a validated value into a TrainConfig field (its type picks the conversion).
template <typename T>
void assign(T& field, const YAML::Node& node) {
  field = node.as<T>();
}
void assign(uint64_t& field, const YAML::Node& node) {
  field = static_cast<uint64_t>(node.as<int64_t>());  // validated non-negative
}
// The enum keys: their values were checked against the choices, which come from the same tables.
void assign(CommAlgorithm& field, const YAML::Node& node) {
  field = *kCommAlgorithmNames.find(node.as<std::string>());
}
void assign(autograd::ComputePrecision& field, const YAML::Node& node) {
  field = autograd::ComputePrecision::parse(node.as<std::string>());
}
void assign(precision::RoundingMode& field, const YAML::Node& node) {
  field = precision::parseRoundingMode(node.as<std::string>());
}
void assign(precision::ScalingMode& field, const YAML::Node& node) {
  field = precision::parseScalingMode(node.as<std::string>());
}
// Formats were validated by the precision module; a float format that names no rounding takes
// precision.rounding once every key is read (fill, in Config.cpp).
void assign(WireFormatChoice& field, const YAML::Node& node) {
  field.spec = precision::CodecSpec::fromYaml(node);
  field.ownRounding = node.IsScalar() ? node.Scalar().find(':') != std::string::npos : bool(node["rounding"]);
}

// An enum key's choices: its names table, then the aliases the help documents.
template <typename E, size_t N>
std::vector<std::string> choicesOf(const EnumNames<E, N>& table, std::initializer_list<const char*> aliases = {}) {
  std::vector<std::string> out(table.names.begin(), table.names.end());
  out.insert(out.end(), aliases.begin(), aliases.end());
  return out;
}

#define APS_FIELD(member) [](TrainConfig& c, const YAML::Node& node) { assign(c.member, node); }

void setHybridRules(TrainConfig& c, const YAML::Node& node) {
  c.precision.hybrid.clear();
  for (const auto& rule : node) {
    TrainConfig::HybridRule parsed{rule["pattern"].as<std::string>(), {}};
    assign(parsed.format, rule["format"]);
    c.precision.hybrid.push_back(std::move(parsed));
  }
}

// Each key once: path, kind, default, range or choices, help, and the field it sets. The
// order is --print-config's (and the resolved tree's, which the config hashes cover).
// clang-format off
std::vector<ConfigKey> runKeys() {
  return {
      {"seed", K::Int, "0", 0, 4294967295.0, {},
       "seed of every random stream (init, data order, augmentation, rounding)", APS_FIELD(seed)},
      {"threads", K::Int, "0", 0, 1024, {},
       "CPU threads per rank; 0: OMP_NUM_THREADS if set, else the node's cores / the ranks on the node",
       APS_FIELD(threads)},
      {"device", K::String, "cpu", 0, 0, {},
       "where the model runs: cpu, cuda or cuda:N (checked at start-up: a GPU this build or machine lacks is refused)",
       APS_FIELD(device)},
      {"cuda.allow_tf32", K::Bool, "true", 0, 0, {},
       "device: cuda: TF32 tensor cores for float32 convolutions and matrix products (PyTorch's default for "
       "convolutions); false: full float32",
       APS_FIELD(cuda.allowTf32)},
      {"cuda.deterministic", K::Bool, "false", 0, 0, {},
       "device: cuda: only convolution algorithms cuDNN marks deterministic (the same bits every run)",
       APS_FIELD(cuda.deterministic)},
      {"epochs", K::Int, "1", 0, 100000, {}, "training epochs (ignored when max_steps > 0)", APS_FIELD(epochs)},
      {"max_steps", K::Int, "0", 0, 1e12, {},
       "train this many optimizer steps in place of epochs (0: train the epochs); the LR schedule is laid out over "
       "them, as over epochs x steps per epoch (Hugging Face's max_steps), and a resume with another value says it "
       "changes the schedule",
       APS_FIELD(maxSteps)},
      {"output_dir", K::String, "''", 0, 0, {},
       "run directory (config.yaml, train.log, metrics.jsonl, checkpoints/); '': runs/<config name>-<time>; "
       "none: no run directory",
       APS_FIELD(outputDir)},
  };
}

std::vector<ConfigKey> modelKeys() {
  return {
      {"model.name", K::Enum, "resnet20", 0, 0, models::modelNames(), "model registry name (aps_model lists them)",
       APS_FIELD(model.name)},
      {"model.num_classes", K::Int, "10", 1, 1e6, {}, "output classes", APS_FIELD(model.numClasses)},
      {"model.in_channels", K::Int, "1", 1, 1024, {}, "input channels", APS_FIELD(model.inChannels)},
      {"model.widths", K::IntList, "[784, 1200, 1200]", 0, 0, {},
       "mlp only: the input features (the dataset's C x H x W) and each hidden layer's width; the classifier maps "
       "the last to num_classes",
       APS_FIELD(model.widths)},
      {"model.init_from", K::String, "''", 0, 0, {},
       "safetensors file of initial weights (torchvision names); missing and unexpected keys are reported",
       APS_FIELD(model.initFrom)},
      {"model.init_map", K::String, "''", 0, 0, {},
       "init_from: rename file keys, 'FROM=TO,...' by prefix (e.g. '=backbone.' puts a torchvision ResNet "
       "under an FCN's backbone)",
       APS_FIELD(model.initMap)},
  };
}

std::vector<ConfigKey> dataKeys() {
  return {
      {"data.dataset", K::Enum, "fashion_mnist", 0, 0,
       {"fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder", "cityscapes", "voc", "fashion_mnist_seg"},
       "dataset format", APS_FIELD(data.dataset)},
      {"data.path", K::String, "''", 0, 0, {},
       "dataset root; empty: the dataset's default location", APS_FIELD(data.path)},
      {"data.batch_size", K::Int, "128", 1, 1e6, {}, "samples per rank per forward and backward (a micro-batch when optimizer.accumulation_steps > 1)", APS_FIELD(data.batchSize)},
      {"data.test_batch_size", K::Int, "256", 1, 1e6, {},
       "samples per evaluation batch", APS_FIELD(data.testBatchSize)},
      {"data.augment", K::Bool, "true", 0, 0, {}, "random crop and flip on training data", APS_FIELD(data.augment)},
      {"data.workers", K::Int, "2", 0, 256, {}, "loader worker threads per rank", APS_FIELD(data.workers)},
      {"data.prefetch", K::Int, "4", 1, 1024, {}, "batches queued ahead of training", APS_FIELD(data.prefetch)},
      {"data.train_samples", K::Int, "0", 0, 1e9, {},
       "use only the first N training samples; 0: all", APS_FIELD(data.trainSamples)},
      {"data.test_samples", K::Int, "0", 0, 1e9, {},
       "evaluate on the first N test samples; 0: all", APS_FIELD(data.testSamples)},
      {"data.validation_samples", K::Int, "0", 0, 1e9, {},
       "hold the last N training samples out of training (without augmentation): the evaluations during "
       "training, keep_best and early stopping use them, the final one the test set; 0: evaluate on the test set",
       APS_FIELD(data.validationSamples)},
      {"data.max_image_pixels", K::Int, "0", 0, 67108864, {},
       "image datasets: refuse a file declaring more pixels; 0: the decoder's limit 67108864 (8192 x 8192)",
       APS_FIELD(data.maxImagePixels)},
      {"data.canvas", K::Int, std::to_string(data::FashionMnistSegmentation::kDefaultCanvas), 28,
       data::FashionMnistSegmentation::kLargestCanvas, {},
       "fashion_mnist_seg: the side of the square canvas the items are pasted on, in pixels", APS_FIELD(data.canvas)},
      {"data.max_items", K::Int, std::to_string(data::FashionMnistSegmentation::kDefaultMaxItems), 1,
       data::FashionMnistSegmentation::kMostItems, {},
       "fashion_mnist_seg: each canvas holds 1 to this many Fashion-MNIST items", APS_FIELD(data.maxItems)},
  };
}

std::vector<ConfigKey> optimizerKeys() {
  return {
      {"optimizer.name", K::Enum, "sgd", 0, 0, {"sgd", "nesterov", "lars", "adamw"},
       "optimizer", APS_FIELD(optimizer.name)},
      {"optimizer.lr", K::Float, "0.1", 0, 1e6, {},
       "peak learning rate (before batch scaling)", APS_FIELD(optimizer.lr)},
      {"optimizer.momentum", K::Float, "0.9", 0, 1, {},
       "momentum (sgd, nesterov, lars)", APS_FIELD(optimizer.momentum)},
      {"optimizer.weight_decay", K::Float, "0.0001", 0, 1, {}, "weight decay", APS_FIELD(optimizer.weightDecay)},
      {"optimizer.clip_grad_norm", K::Float, "0", 0, 1e12, {},
       "scale the reduced gradients so that their global L2 norm is at most this (PyTorch's clip_grad_norm_); "
       "0: off",
       APS_FIELD(optimizer.clipGradNorm)},
      {"optimizer.clip_grad_value", K::Float, "0", 0, 1e12, {},
       "clamp every reduced gradient value to [-v, v] (PyTorch's clip_grad_value_), before clip_grad_norm; 0: off",
       APS_FIELD(optimizer.clipGradValue)},
      {"optimizer.accumulation_steps", K::Int, "1", 1, 4096, {},
       "gradient accumulation: micro-batches of data.batch_size each rank computes per optimizer step, their "
       "gradients summed before one reduction (global batch = world_size x batch_size x accumulation_steps)",
       APS_FIELD(optimizer.accumulationSteps)},
      {"optimizer.exclude_bias_and_norm", K::Bool, "false", 0, 0, {},
       "no weight decay on biases and norm parameters", APS_FIELD(optimizer.excludeBiasAndNorm)},
      {"optimizer.lars_trust", K::Float, "0.001", 0, 1, {}, "LARS trust coefficient", APS_FIELD(optimizer.larsTrust)},
      {"optimizer.beta1", K::Float, "0.9", 0, 1, {}, "AdamW beta1", APS_FIELD(optimizer.beta1)},
      {"optimizer.beta2", K::Float, "0.999", 0, 1, {}, "AdamW beta2", APS_FIELD(optimizer.beta2)},
      {"optimizer.eps", K::Float, "1e-8", 0, 1, {}, "AdamW epsilon", APS_FIELD(optimizer.eps)},
  };
}

std::vector<ConfigKey> lossKeys() {
  return {
      {"loss.label_smoothing", K::Float, "0", 0, 1, {},
       "training loss: mix the one-hot target with the uniform distribution (PyTorch's label_smoothing); the "
       "evaluations' loss stays plain cross-entropy",
       APS_FIELD(loss.labelSmoothing)},
  };
}

std::vector<ConfigKey> scheduleKeys() {
  return {
      {"schedule.name", K::Enum, "multistep", 0, 0, {"constant", "step", "multistep", "cosine", "poly"},
       "LR schedule", APS_FIELD(schedule.name)},
      {"schedule.warmup_epochs", K::Float, "0", 0, 1e5, {}, "linear warm-up length", APS_FIELD(schedule.warmupEpochs)},
      {"schedule.warmup_start_lr", K::Float, "0", 0, 1e6, {},
       "LR at the start of warm-up", APS_FIELD(schedule.warmupStartLr)},
      {"schedule.step_epochs", K::Int, "30", 1, 1e6, {},
       "step: decay every this many epochs", APS_FIELD(schedule.stepEpochs)},
      {"schedule.milestones", K::IntList, "[]", 0, 0, {},
       "multistep: epochs at which the LR decays", APS_FIELD(schedule.milestones)},
      {"schedule.gamma", K::Float, "0.1", 0, 1, {}, "decay factor (step, multistep)", APS_FIELD(schedule.gamma)},
      {"schedule.power", K::Float, "0.9", 0, 100, {}, "poly: exponent", APS_FIELD(schedule.power)},
      {"schedule.min_lr", K::Float, "0", 0, 1e6, {}, "cosine and poly: final LR", APS_FIELD(schedule.minLr)},
      {"schedule.scale_with_batch", K::Bool, "false", 0, 0, {},
       "multiply the LR by global_batch / base_batch", APS_FIELD(schedule.scaleWithBatch)},
      {"schedule.base_batch", K::Int, "256", 1, 1e9, {},
       "reference batch for LR scaling", APS_FIELD(schedule.baseBatch)},
  };
}

std::vector<ConfigKey> precisionKeys() {
  return {
      {"precision.compute", K::Enum, "fp32", 0, 0, choicesOf(autograd::ComputePrecision::names()),
       "arithmetic precision of the model", APS_FIELD(precision.compute)},
      {"precision.loss_scaling", K::Enum, "dynamic", 0, 0, {"dynamic", "static", "none"},
       "16-bit compute: loss scaling (dynamic: halve on inf/NaN and skip, double after 2000 good steps)",
       APS_FIELD(precision.lossScaling)},
      {"precision.loss_scale", K::Float, "65536", 1e-30, 1e30, {},
       "16-bit compute: initial (or static) loss scale", APS_FIELD(precision.lossScale)},
      {"precision.stochastic_update", K::Bool, "false", 0, 0, {},
       "fp16_pure/bf16_pure: round the weight update stochastically instead of to nearest",
       APS_FIELD(precision.stochasticUpdate)},
      {"precision.format", K::Format, "fp32", 0, 0, {},
       fmt::format("wire format of gradients: {}, a name with ':stochastic' or '/block<N>', or a map {{exponent_bits, "
                   "mantissa_bits, ...}}",
                   fmt::join(precision::CodecSpec::names(), ", ")),
       APS_FIELD(precision.format)},
      {"precision.rounding", K::Enum, "nearest", 0, 0, choicesOf(precision::kRoundingModeNames),
       "rounding to the wire format", APS_FIELD(precision.rounding)},
      {"precision.scaling", K::Enum, "none", 0, 0, choicesOf(precision::kScalingModeNames, {"autoscale"}),
       "gradient scaling before quantisation (aps: a power-of-two shift per layer; global: one for all layers; fp8lm: "
       "FP8-LM's per-tensor scale and mu, also spelt autoscale; block: a power-of-two scale per block_size values of "
       "each sender, an E8M0 byte on the wire)",
       APS_FIELD(precision.scaling)},
      {"precision.block_size", K::Int, "32", 0, 1e9, {},
       "scaling: block: values per scale (32: OCP MX; 0: one scale per chunk sent)", APS_FIELD(precision.blockSize)},
      {"precision.hybrid", K::RuleList, "[]", 0, 0, {},
       "per-layer formats: [{pattern: 'fc.*', format: fp16}, ...], first match wins", setHybridRules},
      {"precision.hybrid_auto", K::Bool, "false", 0, 0, {},
       "widen a layer's format when it underflows or saturates too often", APS_FIELD(precision.hybridAuto)},
      {"precision.hybrid_underflow", K::Float, "0.01", 0, 1, {},
       "hybrid_auto: widen when more than this fraction of nonzero values flushes to zero (over stats_window)",
       APS_FIELD(precision.hybridUnderflow)},
      {"precision.hybrid_saturation", K::Float, "0.0001", 0, 1, {},
       "hybrid_auto: widen when more than this fraction of values saturates (over stats_window)",
       APS_FIELD(precision.hybridSaturation)},
      {"precision.error_feedback", K::Bool, "false", 0, 0, {},
       "add the quantisation residual to the next step's gradient", APS_FIELD(precision.errorFeedback)},
      {"precision.kahan", K::Bool, "false", 0, 0, {},
       "Kahan summation in the allgather algorithm", APS_FIELD(precision.kahan)},
      {"precision.pre_divide", K::Bool, "false", 0, 0, {},
       "divide each rank's gradient by the world size before scaling and quantising (the APS artifact) instead of "
       "the sum after",
       APS_FIELD(precision.preDivide)},
      {"precision.autoscale_per_tensor", K::Bool, "true", 0, 0, {},
       "scaling: fp8lm: scale each tensor by 2^floor(log2(max / amax)) / sqrt(N) (amax over all ranks) under mu, "
       "as FP8-LM and MS-AMP do; false: mu alone on raw gradients",
       APS_FIELD(precision.autoscalePerTensor)},
      {"precision.nonfinite", K::Enum, "skip", 0, 0, {"skip", "stop"},
       "on NaN/inf gradients: skip the step (and lower the loss scale) or stop", APS_FIELD(precision.nonfinite)},
      {"precision.stats_window", K::Int, "50", 1, 1e9, {},
       "steps per quantisation statistics window", APS_FIELD(precision.statsWindow)},
      {"precision.probe_interval", K::Int, "0", 0, 1e9, {},
       "fidelity probe: every this many steps (step % K == 0) compare each layer's reduced gradient with an exact "
       "fp32 all-reduce and write a 'probe' metrics record (0: off)",
       APS_FIELD(precision.probeInterval)},
  };
}

std::vector<ConfigKey> commKeys() {
  return {
      {"comm.backend", K::Enum, "mpi", 0, 0, {"mpi", "sim", "nccl"},
       "mpi: one process per rank; sim: virtual ranks in one process; nccl: one process per GPU (needs device: cuda)",
       APS_FIELD(comm.backend)},
      {"comm.world_size", K::Int, "1", 1, 1 << 20, {}, "virtual ranks (sim backend)", APS_FIELD(comm.worldSize)},
      {"comm.algorithm", K::Enum, "two_shot", 0, 0, choicesOf(kCommAlgorithmNames),
       "all-reduce algorithm; hierarchical: two_shot within groups of comm.group_size ranks, then across the groups' "
       "leaders (docs/ALGORITHMS.md, Hierarchical APS)",
       APS_FIELD(comm.algorithm)},
      {"comm.group_size", K::Int, "0", 0, 1 << 20, {},
       "hierarchical: ranks per group (consecutive ranks), dividing the world size; required with hierarchical",
       APS_FIELD(comm.groupSize)},
      {"comm.bucket_mb", K::Float, "25", 0.001, 1e5, {}, "gradient bucket cap in MB", APS_FIELD(comm.bucketMb)},
      {"comm.overlap", K::Bool, "true", 0, 0, {}, "reduce buckets during backward", APS_FIELD(comm.overlap)},
      {"comm.sim_workers", K::Int, "0", 0, 1024, {},
       "simulated ranks computed at once, one thread each, on copies of the model (sim backend; the same bits as "
       "one at a time); 0: the threads per rank, at most the simulated ranks; 1: one rank at a time on all threads",
       APS_FIELD(comm.simWorkers)},
  };
}

std::vector<ConfigKey> parallelKeys() {
  return {
      {"parallel.model_parallel", K::Int, "1", 1, 1024, {},
       "M: ranks that split each parallel.split layer; the world is D data-parallel groups x M (ranks g = d M + m)",
       APS_FIELD(parallel.modelParallel)},
      {"parallel.split", K::StringList, "[]", 0, 0, {},
       "the linear layers split by output features across the M ranks of a group (name globs: ['fc1', 'fc2'])",
       APS_FIELD(parallel.split)},
      {"parallel.activation_format", K::Format, "fp32", 0, 0, {},
       "what the split layers' activations (forward all-gather) and errors (backward reduction) travel in",
       APS_FIELD(parallel.activationFormat)},
      {"parallel.activation_scaling", K::Enum, "aps", 0, 0, {"aps", "none"},
       "float activation formats: aps scales each message by a power of two that puts its largest value in the "
       "format's top binade (the shift travels in a 4-byte header); none sends the values as they are",
       APS_FIELD(parallel.activationScaling)},
  };
}

std::vector<ConfigKey> checkpointKeys() {
  return {
      {"checkpoint.dir", K::String, "''", 0, 0, {},
       "checkpoint directory; '': <output_dir>/checkpoints (none without a run directory)",
       APS_FIELD(checkpoint.dir)},
      {"checkpoint.interval_epochs", K::Int, "1", 1, 1e6, {},
       "epochs between checkpoints", APS_FIELD(checkpoint.intervalEpochs)},
      {"checkpoint.interval_steps", K::Int, "0", 0, 1e12, {},
       "also a checkpoint every this many steps; 0: at epoch intervals only", APS_FIELD(checkpoint.intervalSteps)},
      {"checkpoint.keep", K::Int, "2", 1, 1e6, {}, "checkpoints kept", APS_FIELD(checkpoint.keep)},
      {"checkpoint.keep_best", K::Bool, "false", 0, 0, {},
       "after each evaluation that improves eval.monitor, write its weights to <checkpoint.dir>/best.safetensors",
       APS_FIELD(checkpoint.keepBest)},
      {"checkpoint.world_change", K::Enum, "refuse", 0, 0, {"refuse", "keep_global_batch", "keep_rank_batch"},
       "a resume on another number of ranks (a requeued job's new allocation): refuse; keep_global_batch (each rank "
       "takes global batch / ranks); keep_rank_batch (the global batch changes, the LR with it unless "
       "schedule.scale_with_batch does so already). The position in the epoch, the shards and per-rank streams are "
       "re-derived and error-feedback residuals restart from zero, as the log says",
       APS_FIELD(checkpoint.worldChange)},
      {"checkpoint.overwrite", K::Bool, "false", 0, 0, {},
       "a fresh run (no --resume) may delete the checkpoints another run left in checkpoint.dir",
       APS_FIELD(checkpoint.overwrite)},
  };
}

std::vector<ConfigKey> evalKeys() {
  return {
      {"eval.interval_epochs", K::Int, "1", 0, 1e6, {},
       "epochs between evaluations; 0: only at the end", APS_FIELD(evalIntervalEpochs)},
      {"eval.monitor", K::Enum, "auto", 0, 0, {"auto", "top1", "top5", "loss", "miou", "pixel_accuracy"},
       "the metric checkpoint.keep_best and eval.early_stopping watch (loss: lower is better); auto: top1, or "
       "miou for segmentation",
       APS_FIELD(eval.monitor)},
      {"eval.min_delta", K::Float, "0", 0, 1e9, {},
       "an evaluation improves on the best only by more than this (in the metric's units: 0.001 is 0.1 points)",
       APS_FIELD(eval.minDelta)},
      {"eval.early_stopping", K::Int, "0", 0, 1e9, {},
       "stop training after this many evaluations in a row without improvement of eval.monitor, then evaluate "
       "on the test set as at the end; 0: never",
       APS_FIELD(eval.earlyStopping)},
  };
}

std::vector<ConfigKey> loggingKeys() {
  return {
      {"logging.interval", K::Int, "50", 1, 1e9, {}, "steps between log lines", APS_FIELD(logging.interval)},
      {"logging.metrics_file", K::String, "''", 0, 0, {},
       "JSON-lines metrics file; '': <output_dir>/metrics.jsonl (none without a run directory)",
       APS_FIELD(logging.metricsFile)},
      {"logging.tensorboard_dir", K::String, "''", 0, 0, {},
       "TensorBoard event files of every metrics record's numbers (tags train/loss, eval/top1, ...); '': "
       "<output_dir>/tensorboard (none without a run directory); none: off",
       APS_FIELD(logging.tensorboardDir)},
      {"logging.level", K::Enum, "info", 0, 0, {"trace", "debug", "info", "warn", "error", "off"},
       "log level", APS_FIELD(logging.level)},
      {"logging.all_ranks", K::Bool, "false", 0, 0, {},
       "every rank logs, with [rank k] prefixes", APS_FIELD(logging.allRanks)},
      {"logging.progress", K::Bool, "true", 0, 0, {},
       "progress bar when stderr is a terminal", APS_FIELD(logging.progress)},
  };
}
// clang-format on
#undef APS_FIELD

std::vector<ConfigKey> buildSchema() {
  std::vector<ConfigKey> all;
  for (auto section : {runKeys, modelKeys, dataKeys, optimizerKeys, lossKeys, scheduleKeys, precisionKeys, commKeys,
                       parallelKeys, checkpointKeys, evalKeys, loggingKeys}) {
    for (auto& key : section()) all.push_back(std::move(key));
  }
  return all;
}

std::string lastComponent(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

const std::vector<ConfigKey>& configSchema() {
  static const std::vector<ConfigKey> schema = buildSchema();
  return schema;
}

const ConfigKey* findConfigKey(const std::string& path) {
  for (const auto& key : configSchema()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

bool isConfigSection(const std::string& path) {
  const std::string prefix = path + ".";
  return std::any_of(configSchema().begin(), configSchema().end(),
                     [&](const ConfigKey& k) { return k.path.compare(0, prefix.size(), prefix) == 0; });
}

std::string closestConfigKey(const std::string& path) {
  std::string best;
  size_t bestDistance = 3;  // more than two edits away is not a typo
  std::vector<std::string> candidates;
  for (const auto& key : configSchema()) {
    candidates.push_back(key.path);
    const auto dot = key.path.find('.');
    if (dot != std::string::npos) candidates.push_back(key.path.substr(0, dot));  // sections
  }
  for (const auto& candidate : candidates) {
    size_t d = editDistance(path, candidate);
    // A misspelt leaf under the right section ("optimizer.lrr") or a misplaced leaf.
    if (lastComponent(candidate) == lastComponent(path)) d = std::min<size_t>(d, 1);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}

namespace {
// How --help-config names each ValueKind (one name per enumerator, in order).
inline constexpr EnumNames<ValueKind, 9> kValueKindNames{{"int", "float", "bool", "string", "choice", "list of ints",
                                                          "number format (a preset name or a map)",
                                                          "list of {pattern, format} rules", "list of strings"}};
static_assert(kValueKindNames.covers(ValueKind::StringList), "one name per ValueKind");
}  // namespace

std::string describeConfigKeys(const std::string& key) {
  std::string out;
  for (const ConfigKey& k : configSchema()) {
    if (!key.empty() && k.path != key && !k.path.starts_with(key + ".")) continue;
    out += fmt::format("{}: {}, default {}", k.path, kValueKindNames.name(k.kind), k.defaultValue);
    if (!k.choices.empty()) out += fmt::format(", one of {}", fmt::join(k.choices, ", "));
    if (k.min != 0.0 || k.max != 0.0) {
      out += k.kind == ValueKind::Int ? fmt::format(", in [{:.0f}, {:.0f}]", k.min, k.max)
                                      : fmt::format(", in [{:g}, {:g}]", k.min, k.max);
    }
    out += fmt::format("\n    {}\n", k.help);
  }
  if (out.empty()) {
    const std::string near = closestConfigKey(key);
    APS_FAIL("--help-config: no key or section '{}'{}", key,
             near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near));
  }
  return out;
}

}  // namespace aps::train
