#include "framework/train/ConfigSchema.h"

#include <algorithm>

namespace aps::train {

namespace {

using K = ValueKind;

std::vector<ConfigKey> buildSchema() {
  const std::vector<std::string> formats{};  // formats are validated by the precision module
  return {
      {"seed",
       K::Int,
       "0",
       0,
       4294967295.0,
       {},
       "seed of every random stream (init, data order, augmentation, rounding)"},
      {"threads", K::Int, "0", 0, 1024, {}, "CPU threads per rank; 0: 1 under mpirun, all cores otherwise"},
      {"device", K::Enum, "cpu", 0, 0, {"cpu", "cuda"}, "where the model runs"},
      {"epochs", K::Int, "1", 0, 100000, {}, "training epochs (ignored when max_steps > 0)"},
      {"max_steps", K::Int, "0", 0, 1e12, {}, "stop after this many optimizer steps; 0: run all epochs"},

      {"model.name", K::String, "resnet20", 0, 0, {}, "model registry name (resnet20, resnet50, fcn_resnet20, ...)"},
      {"model.num_classes", K::Int, "10", 1, 1e6, {}, "output classes"},
      {"model.in_channels", K::Int, "1", 1, 1024, {}, "input channels"},

      {"data.dataset",
       K::Enum,
       "fashion_mnist",
       0,
       0,
       {"fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder", "cityscapes", "voc", "fashion_mnist_seg"},
       "dataset format"},
      {"data.path", K::String, "''", 0, 0, {}, "dataset root; empty: the dataset's default location"},
      {"data.batch_size", K::Int, "128", 1, 1e6, {}, "samples per rank per step"},
      {"data.test_batch_size", K::Int, "256", 1, 1e6, {}, "samples per evaluation batch"},
      {"data.augment", K::Bool, "true", 0, 0, {}, "random crop and flip on training data"},
      {"data.workers", K::Int, "2", 0, 256, {}, "loader worker threads per rank"},
      {"data.prefetch", K::Int, "4", 1, 1024, {}, "batches queued ahead of training"},
      {"data.train_samples", K::Int, "0", 0, 1e9, {}, "use only the first N training samples; 0: all"},
      {"data.test_samples", K::Int, "0", 0, 1e9, {}, "evaluate on the first N test samples; 0: all"},

      {"optimizer.name", K::Enum, "sgd", 0, 0, {"sgd", "nesterov", "lars", "adamw"}, "optimizer"},
      {"optimizer.lr", K::Float, "0.1", 0, 1e6, {}, "peak learning rate (before batch scaling)"},
      {"optimizer.momentum", K::Float, "0.9", 0, 1, {}, "momentum (sgd, nesterov, lars)"},
      {"optimizer.weight_decay", K::Float, "0.0001", 0, 1, {}, "weight decay"},
      {"optimizer.exclude_bias_and_norm", K::Bool, "false", 0, 0, {}, "no weight decay on biases and norm parameters"},
      {"optimizer.lars_trust", K::Float, "0.001", 0, 1, {}, "LARS trust coefficient"},
      {"optimizer.beta1", K::Float, "0.9", 0, 1, {}, "AdamW beta1"},
      {"optimizer.beta2", K::Float, "0.999", 0, 1, {}, "AdamW beta2"},
      {"optimizer.eps", K::Float, "1e-8", 0, 1, {}, "AdamW epsilon"},

      {"schedule.name", K::Enum, "multistep", 0, 0, {"constant", "step", "multistep", "cosine", "poly"}, "LR schedule"},
      {"schedule.warmup_epochs", K::Float, "0", 0, 1e5, {}, "linear warm-up length"},
      {"schedule.warmup_start_lr", K::Float, "0", 0, 1e6, {}, "LR at the start of warm-up"},
      {"schedule.step_epochs", K::Int, "30", 1, 1e6, {}, "step: decay every this many epochs"},
      {"schedule.milestones", K::IntList, "[]", 0, 0, {}, "multistep: epochs at which the LR decays"},
      {"schedule.gamma", K::Float, "0.1", 0, 1, {}, "decay factor (step, multistep)"},
      {"schedule.power", K::Float, "0.9", 0, 100, {}, "poly: exponent"},
      {"schedule.min_lr", K::Float, "0", 0, 1e6, {}, "cosine and poly: final LR"},
      {"schedule.scale_with_batch", K::Bool, "false", 0, 0, {}, "multiply the LR by global_batch / base_batch"},
      {"schedule.base_batch", K::Int, "256", 1, 1e9, {}, "reference batch for LR scaling"},

      {"precision.compute",
       K::Enum,
       "fp32",
       0,
       0,
       {"fp32", "fp16_mixed", "fp16_pure", "bf16_mixed", "bf16_pure"},
       "arithmetic precision of the model"},
      {"precision.loss_scaling",
       K::Enum,
       "dynamic",
       0,
       0,
       {"dynamic", "static", "none"},
       "16-bit compute: loss scaling (dynamic: halve on inf/NaN and skip, double after 2000 good steps)"},
      {"precision.loss_scale", K::Float, "65536", 1e-30, 1e30, {}, "16-bit compute: initial (or static) loss scale"},
      {"precision.stochastic_update",
       K::Bool,
       "false",
       0,
       0,
       {},
       "fp16_pure/bf16_pure: round the weight update stochastically instead of to nearest"},
      {"precision.format", K::Format, "fp32", 0, 0, {}, "wire format of gradients: a preset or {exponent_bits, ...}"},
      {"precision.rounding",
       K::Enum,
       "nearest",
       0,
       0,
       {"nearest", "stochastic", "toward_zero"},
       "rounding to the wire format"},
      {"precision.scaling",
       K::Enum,
       "none",
       0,
       0,
       {"none", "aps", "global", "autoscale"},
       "gradient scaling before quantisation"},
      {"precision.hybrid",
       K::RuleList,
       "[]",
       0,
       0,
       {},
       "per-layer formats: [{pattern: 'fc.*', format: fp16}, ...], first match wins"},
      {"precision.hybrid_auto",
       K::Bool,
       "false",
       0,
       0,
       {},
       "widen a layer's format when it underflows or saturates too often"},
      {"precision.hybrid_underflow",
       K::Float,
       "0.01",
       0,
       1,
       {},
       "hybrid_auto: widen when more than this fraction of nonzero values flushes to zero (over stats_window)"},
      {"precision.hybrid_saturation",
       K::Float,
       "0.0001",
       0,
       1,
       {},
       "hybrid_auto: widen when more than this fraction of values saturates (over stats_window)"},
      {"precision.error_feedback",
       K::Bool,
       "false",
       0,
       0,
       {},
       "add the quantisation residual to the next step's gradient"},
      {"precision.kahan", K::Bool, "false", 0, 0, {}, "Kahan summation in the allgather algorithm"},
      {"precision.nonfinite", K::Enum, "skip", 0, 0, {"skip", "stop"}, "on NaN/inf gradients: skip the step (and lower the loss scale) or stop"},
      {"precision.stats_window", K::Int, "50", 1, 1e9, {}, "steps per quantisation statistics window"},

      {"comm.backend",
       K::Enum,
       "mpi",
       0,
       0,
       {"mpi", "sim"},
       "mpi: one process per rank; sim: virtual ranks in one process"},
      {"comm.world_size", K::Int, "1", 1, 1 << 20, {}, "virtual ranks (sim backend)"},
      {"comm.algorithm",
       K::Enum,
       "two_shot",
       0,
       0,
       {"ring", "two_shot", "allgather", "native"},
       "all-reduce algorithm"},
      {"comm.bucket_mb", K::Float, "25", 0.001, 1e5, {}, "gradient bucket cap in MB"},
      {"comm.overlap", K::Bool, "true", 0, 0, {}, "reduce buckets during backward"},

      {"checkpoint.dir", K::String, "''", 0, 0, {}, "checkpoint directory; empty: no checkpoints"},
      {"checkpoint.interval_epochs", K::Int, "1", 1, 1e6, {}, "epochs between checkpoints"},
      {"checkpoint.keep", K::Int, "2", 1, 1e6, {}, "checkpoints kept"},
      {"checkpoint.overwrite",
       K::Bool,
       "false",
       0,
       0,
       {},
       "a fresh run (no --resume) may delete the checkpoints another run left in checkpoint.dir"},

      {"eval.interval_epochs", K::Int, "1", 0, 1e6, {}, "epochs between evaluations; 0: only at the end"},

      {"logging.interval", K::Int, "50", 1, 1e9, {}, "steps between log lines"},
      {"logging.metrics_file", K::String, "''", 0, 0, {}, "JSON-lines metrics file; empty: none"},
      {"logging.level", K::Enum, "info", 0, 0, {"trace", "debug", "info", "warn", "error", "off"}, "log level"},
      {"logging.all_ranks", K::Bool, "false", 0, 0, {}, "every rank logs, with [rank k] prefixes"},
      {"logging.progress", K::Bool, "true", 0, 0, {}, "progress bar when stderr is a terminal"},
  };
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
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

}  // namespace aps::train
