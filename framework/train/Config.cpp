#include "framework/train/Config.h"

#include "framework/core/Error.h"
#include "framework/train/ConfigSchema.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace aps::train {

namespace {

// Where a node came from, for messages: "file:line" (lines are 1-based).
std::string where(const std::string& source, const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0) return source;
  return fmt::format("{}:{}", source, mark.line + 1);
}

std::string hint(const std::string& path) {
  const std::string close = closestConfigKey(path);
  return close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close);
}

std::vector<std::string> splitPath(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream stream(path);
  for (std::string part; std::getline(stream, part, '.');) parts.push_back(part);
  return parts;
}

// Sets root[a][b][c] for path "a.b.c", turning what stands in the way into maps. Walks with
// fresh handles: assigning through a YAML::Node reference would rebind it.
void setPath(YAML::Node& root, const std::string& path, const YAML::Node& value) {
  const auto parts = splitPath(path);
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!chain.back()[parts[i]].IsMap()) chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
    chain.push_back(chain.back()[parts[i]]);
  }
  chain.back()[parts.back()] = value;
}

// The node at `path`, or an undefined/null node when absent (a copy: reading never inserts).
YAML::Node nodeAt(const YAML::Node& root, const std::string& path) {
  YAML::Node node = YAML::Clone(root);
  for (const auto& part : splitPath(path)) {
    if (!node.IsMap() || !node[part]) return YAML::Node();
    node = node[part];
  }
  return node;
}

// Splits "a.b.c=value" into the path and the YAML value.
std::pair<std::string, std::string> splitOverride(const std::string& text) {
  const auto eq = text.find('=');
  APS_CHECK(eq != std::string::npos && eq > 0, "--set '{}': expected key.path=value", text);
  return {text.substr(0, eq), text.substr(eq + 1)};
}

void applyOverride(YAML::Node& root, const std::string& text) {
  const auto [path, valueText] = splitOverride(text);
  APS_CHECK(findConfigKey(path) != nullptr, "--set {}: unknown key '{}'{}", text, path, hint(path));
  YAML::Node value;
  try {
    value = YAML::Load(valueText);
  } catch (const YAML::Exception& e) {
    APS_FAIL("--set {}: value is not valid YAML: {}", text, e.msg);
  }
  setPath(root, path, value);
}

class Validator {
 public:
  explicit Validator(std::string source) : source_(std::move(source)) {}

  void checkKeys(const YAML::Node& map, const std::string& prefix) {
    for (const auto& entry : map) {
      APS_CHECK(entry.first.IsScalar(), "{}: a key under '{}' is {}, not a name", where(source_, entry.first),
                prefix.empty() ? "the top level" : prefix, describe(entry.first));
      const std::string key = entry.first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (findConfigKey(path) != nullptr) continue;
      if (isConfigSection(path)) {
        APS_CHECK(entry.second.IsMap() || entry.second.IsNull(), "{}: '{}' is a section and must be a map",
                  where(source_, entry.first), path);
        if (entry.second.IsMap()) checkKeys(entry.second, path);
        continue;
      }
      APS_FAIL("{}: unknown key '{}'{}", where(source_, entry.first), path, hint(path));
    }
  }

  // Returns the node at `key.path` in `root`, or the key's default when absent.
  YAML::Node valueOf(const YAML::Node& root, const ConfigKey& key) {
    const YAML::Node node = nodeAt(root, key.path);
    return node.IsDefined() && !node.IsNull() ? node : YAML::Load(key.defaultValue);
  }

  void checkValue(const ConfigKey& key, const YAML::Node& node) {
    const std::string at = where(source_, node);
    switch (key.kind) {
      case ValueKind::Int: {
        const double v = number(key, node, at);
        // As the value will be read (yaml-cpp's integer syntax: "089" is a number but no integer).
        long long asInteger = 0;
        APS_CHECK(std::floor(v) == v && YAML::convert<long long>::decode(node, asInteger),
                  "{}: '{}' must be an integer, got '{}'", at, key.path, node.Scalar());
        checkRange(key, v, at, node);
        break;
      }
      case ValueKind::Float:
        checkRange(key, number(key, node, at), at, node);
        break;
      case ValueKind::Bool: {
        bool b = false;
        APS_CHECK(node.IsScalar() && YAML::convert<bool>::decode(node, b), "{}: '{}' must be true or false, got '{}'",
                  at, key.path, describe(node));
        break;
      }
      case ValueKind::String:
        APS_CHECK(node.IsScalar(), "{}: '{}' must be a string, got {}", at, key.path, describe(node));
        break;
      case ValueKind::Enum: {
        APS_CHECK(node.IsScalar(), "{}: '{}' must be one of {}, got {}", at, key.path, fmt::join(key.choices, ", "),
                  describe(node));
        const std::string v = node.Scalar();
        if (std::find(key.choices.begin(), key.choices.end(), v) == key.choices.end()) {
          APS_FAIL("{}: '{}' must be one of {}, got '{}'", at, key.path, fmt::join(key.choices, ", "), v);
        }
        break;
      }
      case ValueKind::IntList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of integers, got {}", at, key.path, describe(node));
        for (const auto& item : node) {
          long long v = 0;
          APS_CHECK(item.IsScalar() && YAML::convert<long long>::decode(item, v),
                    "{}: '{}' must be a list of integers, got element {}", where(source_, item), key.path,
                    describe(item));
        }
        break;
      case ValueKind::Format:
        APS_CHECK(node.IsScalar() || node.IsMap(), "{}: '{}' must be a format name or a map, got {}", at, key.path,
                  describe(node));
        break;
      case ValueKind::RuleList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of {{pattern, format}} rules, got {}", at, key.path,
                  describe(node));
        for (const auto& rule : node) {
          const std::string ruleAt = where(source_, rule);
          APS_CHECK(rule.IsMap() && rule["pattern"] && rule["format"] && rule.size() == 2,
                    "{}: each '{}' rule must be a map with exactly 'pattern' and 'format'", ruleAt, key.path);
          APS_CHECK(rule["pattern"].IsScalar(), "{}: '{}' rule pattern must be a string", ruleAt, key.path);
        }
        break;
    }
  }

 private:
  static std::string describe(const YAML::Node& node) {
    if (node.IsScalar()) return fmt::format("'{}'", node.Scalar());
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "a map";
    return "nothing";
  }

  static double number(const ConfigKey& key, const YAML::Node& node, const std::string& at) {
    double v = 0;
    APS_CHECK(node.IsScalar() && YAML::convert<double>::decode(node, v) && std::isfinite(v),
              "{}: '{}' must be a number, got {}", at, key.path, describe(node));
    return v;
  }

  static void checkRange(const ConfigKey& key, double v, const std::string& at, const YAML::Node& node) {
    if (key.min == 0.0 && key.max == 0.0) return;
    APS_CHECK(v >= key.min && v <= key.max, "{}: '{}' = {} is out of range [{}, {}]", at, key.path, node.Scalar(),
              key.min, key.max);
  }

  std::string source_;
};

template <typename T>
T get(const YAML::Node& resolved, const std::string& path) {
  return nodeAt(resolved, path).as<T>();
}

void fill(TrainConfig& c) {
  const YAML::Node& r = c.resolved;
  c.seed = static_cast<uint64_t>(get<int64_t>(r, "seed"));  // validated as a non-negative integer
  c.threads = get<int64_t>(r, "threads");
  c.device = get<std::string>(r, "device");
  c.epochs = get<int64_t>(r, "epochs");
  c.maxSteps = get<int64_t>(r, "max_steps");
  c.evalIntervalEpochs = get<int64_t>(r, "eval.interval_epochs");
  c.model = {get<std::string>(r, "model.name"), get<int64_t>(r, "model.num_classes"),
             get<int64_t>(r, "model.in_channels")};
  auto& d = c.data;
  d.dataset = get<std::string>(r, "data.dataset");
  d.path = get<std::string>(r, "data.path");
  d.batchSize = get<int64_t>(r, "data.batch_size");
  d.testBatchSize = get<int64_t>(r, "data.test_batch_size");
  d.workers = get<int64_t>(r, "data.workers");
  d.prefetch = get<int64_t>(r, "data.prefetch");
  d.trainSamples = get<int64_t>(r, "data.train_samples");
  d.testSamples = get<int64_t>(r, "data.test_samples");
  d.augment = get<bool>(r, "data.augment");
  auto& o = c.optimizer;
  o.name = get<std::string>(r, "optimizer.name");
  o.lr = get<double>(r, "optimizer.lr");
  o.momentum = get<double>(r, "optimizer.momentum");
  o.weightDecay = get<double>(r, "optimizer.weight_decay");
  o.excludeBiasAndNorm = get<bool>(r, "optimizer.exclude_bias_and_norm");
  o.larsTrust = get<double>(r, "optimizer.lars_trust");
  o.beta1 = get<double>(r, "optimizer.beta1");
  o.beta2 = get<double>(r, "optimizer.beta2");
  o.eps = get<double>(r, "optimizer.eps");
  auto& s = c.schedule;
  s.name = get<std::string>(r, "schedule.name");
  s.warmupEpochs = get<double>(r, "schedule.warmup_epochs");
  s.warmupStartLr = get<double>(r, "schedule.warmup_start_lr");
  s.stepEpochs = get<int64_t>(r, "schedule.step_epochs");
  s.milestones = get<std::vector<int64_t>>(r, "schedule.milestones");
  s.gamma = get<double>(r, "schedule.gamma");
  s.power = get<double>(r, "schedule.power");
  s.minLr = get<double>(r, "schedule.min_lr");
  s.scaleWithBatch = get<bool>(r, "schedule.scale_with_batch");
  s.baseBatch = get<int64_t>(r, "schedule.base_batch");
  auto& p = c.precision;
  p.compute = get<std::string>(r, "precision.compute");
  p.format = nodeAt(r, "precision.format");
  p.rounding = get<std::string>(r, "precision.rounding");
  p.scaling = get<std::string>(r, "precision.scaling");
  for (const auto& rule : nodeAt(r, "precision.hybrid")) {
    p.hybrid.push_back({rule["pattern"].as<std::string>(), YAML::Clone(rule["format"])});
  }
  p.hybridAuto = get<bool>(r, "precision.hybrid_auto");
  p.hybridUnderflow = get<double>(r, "precision.hybrid_underflow");
  p.hybridSaturation = get<double>(r, "precision.hybrid_saturation");
  p.lossScaling = get<std::string>(r, "precision.loss_scaling");
  p.lossScale = get<double>(r, "precision.loss_scale");
  p.stochasticUpdate = get<bool>(r, "precision.stochastic_update");
  p.errorFeedback = get<bool>(r, "precision.error_feedback");
  p.kahan = get<bool>(r, "precision.kahan");
  p.nonfinite = get<std::string>(r, "precision.nonfinite");
  p.statsWindow = get<int64_t>(r, "precision.stats_window");
  c.comm = {get<std::string>(r, "comm.backend"), get<std::string>(r, "comm.algorithm"),
            get<int64_t>(r, "comm.world_size"), get<double>(r, "comm.bucket_mb"), get<bool>(r, "comm.overlap")};
  c.checkpoint = {get<std::string>(r, "checkpoint.dir"), get<int64_t>(r, "checkpoint.interval_epochs"),
                  get<int64_t>(r, "checkpoint.keep")};
  c.logging = {get<int64_t>(r, "logging.interval"), get<std::string>(r, "logging.metrics_file"),
               get<std::string>(r, "logging.level"), get<bool>(r, "logging.all_ranks"),
               get<bool>(r, "logging.progress")};
}

}  // namespace

TrainConfig parseConfig(const std::string& yamlText, const std::string& name,
                        const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yamlText);
  } catch (const YAML::Exception& e) {
    APS_FAIL("{}:{}: invalid YAML: {}", name, e.mark.line + 1, e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  APS_CHECK(root.IsMap(), "{}: the config must be a map of keys, got {}", name,
            root.IsSequence() ? "a list" : "a scalar");
  Validator validator(name);
  validator.checkKeys(root, "");
  for (const auto& text : overrides) applyOverride(root, text);

  TrainConfig config;
  config.sourceFile = name;
  config.resolved = YAML::Node(YAML::NodeType::Map);
  for (const auto& key : configSchema()) {
    const YAML::Node value = validator.valueOf(root, key);
    validator.checkValue(key, value);
    setPath(config.resolved, key.path, YAML::Clone(value));
  }
  fill(config);
  if (config.schedule.name == "multistep") {
    for (size_t i = 1; i < config.schedule.milestones.size(); ++i) {
      APS_CHECK(config.schedule.milestones[i] > config.schedule.milestones[i - 1],
                "{}: 'schedule.milestones' must increase, got {}", name, fmt::join(config.schedule.milestones, ", "));
    }
  }
  APS_CHECK(config.comm.backend == "sim" || config.comm.worldSize == 1,
            "{}: 'comm.world_size' = {} applies to the sim backend only (under mpi the world is mpirun's -np)", name,
            config.comm.worldSize);
  return config;
}

TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  APS_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  return parseConfig(text.str(), path, overrides);
}

std::string configToYaml(const TrainConfig& config) {
  YAML::Emitter out;
  out << config.resolved;
  return std::string(out.c_str()) + "\n";
}

namespace {
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace

uint64_t configHash(const TrainConfig& config) { return fnv1a(configToYaml(config)); }

uint64_t resumeHash(const TrainConfig& config) {
  YAML::Node tree = YAML::Clone(config.resolved);
  for (const char* key : {"epochs", "max_steps", "checkpoint", "logging", "eval", "threads"}) tree.remove(key);
  tree["data"].remove("workers");
  tree["data"].remove("prefetch");
  YAML::Emitter out;
  out << tree;
  return fnv1a(out.c_str());
}

}  // namespace aps::train
