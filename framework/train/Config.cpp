#include "framework/train/Config.h"

#include "data/FashionMnistSegmentation.h"
#include "framework/core/Error.h"
#include "framework/core/Suggest.h"
#include "framework/tensor/Device.h"
#include "framework/train/ConfigSchema.h"
#include "precision/CodecSpec.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

namespace aps::train {

namespace {

// Where a node came from, for messages: "file:line" (lines are 1-based).
std::string where(const std::string& source, const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0) return source;
  return fmt::format("{}:{}", source, mark.line + 1);
}

// A value or key as messages quote it: long text is cut (a 1 MB value is not echoed whole).
std::string shorten(const std::string& text) {
  constexpr size_t kMax = 60;
  if (text.size() <= kMax) return text;
  return fmt::format("{}... ({} characters)", text.substr(0, kMax), text.size());
}

std::string hint(const std::string& path) {
  if (path.size() > 100) return "";  // no key is that long; and edit distances on it would be slow
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

// The node at `path`, or an undefined node when absent. Reads through const handles, so nothing
// is inserted and nothing is cloned: the node keeps its mark (file line) for messages.
YAML::Node nodeAt(const YAML::Node& root, const std::string& path) {
  std::vector<YAML::Node> chain{root};
  for (const auto& part : splitPath(path)) {
    const YAML::Node& node = chain.back();
    if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node next = node[part];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    chain.push_back(next);
  }
  return chain.back();
}

// Splits "a.b.c=value" into the path and the YAML value.
std::pair<std::string, std::string> splitOverride(const std::string& text) {
  const auto eq = text.find('=');
  APS_CHECK(eq != std::string::npos && eq > 0, "--set '{}': expected key.path=value", text);
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// Applies one --set to `root` and returns its path. The value must be a value: an empty one
// ("--set optimizer.lr=") or null ("~") would silently become the default, so it is refused.
std::string applyOverride(YAML::Node& root, const std::string& text) {
  const auto [path, valueText] = splitOverride(text);
  const std::string shown = shorten(text);
  APS_CHECK(findConfigKey(path) != nullptr, "--set {}: unknown key '{}'{}", shown, shorten(path), hint(path));
  YAML::Node value;
  try {
    value = YAML::Load(valueText);
  } catch (const YAML::Exception& e) {
    APS_FAIL("--set {}: value is not valid YAML: {}", shown, e.msg);
  }
  APS_CHECK(value.IsDefined() && !value.IsNull(), "--set {}: '{}' has no value (an empty string is written {}='')",
            shown, path, path);
  setPath(root, path, value);
  return path;
}

// A value as messages describe it.
std::string describe(const YAML::Node& node) {
  if (node.IsScalar()) return fmt::format("'{}'", shorten(node.Scalar()));
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

// Checks the keys of one file's `map` (at `prefix`): names, duplicates, values given, sections
// as maps; `source` is the file named in messages. The top-level `base` is no config key: the
// composition reads it (Composer below).
void checkKeys(const YAML::Node& map, const std::string& prefix, const std::string& source) {
  std::map<std::string, int> seen;  // key -> line: yaml-cpp keeps duplicates, lookups see the first
  for (const auto& entry : map) {
    APS_CHECK(entry.first.IsScalar(), "{}: a key under '{}' is {}, not a name", where(source, entry.first),
              prefix.empty() ? "the top level" : prefix, describe(entry.first));
    const std::string key = entry.first.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const auto [first, inserted] = seen.emplace(key, entry.first.Mark().line + 1);
    APS_CHECK(inserted, "{}: '{}' is given twice (first at line {}); remove one of them", where(source, entry.first),
              shorten(path), first->second);
    if (path == "base") continue;
    if (const ConfigKey* leaf = findConfigKey(path)) {
      // "lr:" or "lr: ~" would silently become the default: say so instead.
      APS_CHECK(!entry.second.IsNull(), "{}: '{}' has no value; give one or delete the line for the default ({})",
                where(source, entry.first), path, leaf->defaultValue);
      continue;
    }
    if (isConfigSection(path)) {
      APS_CHECK(entry.second.IsMap() || entry.second.IsNull(), "{}: '{}' is a section and must be a map",
                where(source, entry.first), path);
      if (entry.second.IsMap()) checkKeys(entry.second, path, source);
      continue;
    }
    APS_FAIL("{}: unknown key '{}'{}", where(source, entry.first), shorten(path), hint(path));
  }
}

class Validator {
 public:
  // `source` is the config's file; `files` the file each key's value came from when that is
  // one of its bases.
  Validator(std::string source, std::map<std::string, std::string> files)
      : source_(std::move(source)), files_(std::move(files)) {}

  // Values set by --set are reported as "--set key=value", not at a line of a file.
  void setOrigin(const std::string& path, const std::string& overrideText) {
    overrides_[path] = "--set " + shorten(overrideText);
  }

  // Returns the node at `key.path` in `root`, or the key's default when absent.
  YAML::Node valueOf(const YAML::Node& root, const ConfigKey& key) {
    const YAML::Node node = nodeAt(root, key.path);
    return node.IsDefined() && !node.IsNull() ? node : YAML::Load(key.defaultValue);
  }

  void checkValue(const ConfigKey& key, const YAML::Node& node) {
    const std::string at = origin(key, node);
    switch (key.kind) {
      case ValueKind::Int: {
        const double v = number(key, node, at);
        // As the value will be read (yaml-cpp's integer syntax: "089" is a number but no integer).
        long long asInteger = 0;
        APS_CHECK(std::floor(v) == v && YAML::convert<long long>::decode(node, asInteger),
                  "{}: '{}' must be an integer, got '{}'", at, key.path, shorten(node.Scalar()));
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
          APS_FAIL("{}: '{}' must be one of {}, got '{}'{}", at, key.path, fmt::join(key.choices, ", "), shorten(v),
                   didYouMean(v, key.choices));
        }
        break;
      }
      case ValueKind::IntList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of integers, got {}", at, key.path, describe(node));
        for (const auto& item : node) {
          long long v = 0;
          APS_CHECK(item.IsScalar() && YAML::convert<long long>::decode(item, v),
                    "{}: '{}' must be a list of integers, got element {}", origin(key, item), key.path, describe(item));
        }
        break;
      case ValueKind::StringList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of strings, got {}", at, key.path, describe(node));
        for (const auto& item : node) {
          APS_CHECK(item.IsScalar(), "{}: '{}' must be a list of strings, got element {}", origin(key, item),
                    key.path, describe(item));
        }
        break;
      case ValueKind::Format:
        APS_CHECK(node.IsScalar() || node.IsMap(), "{}: '{}' must be a format name or a map, got {}", at, key.path,
                  describe(node));
        checkFormat(key, node, at);
        break;
      case ValueKind::RuleList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of {{pattern, format}} rules, got {}", at, key.path,
                  describe(node));
        for (const auto& rule : node) {
          const std::string ruleAt = origin(key, rule);
          APS_CHECK(rule.IsMap() && rule["pattern"] && rule["format"] && rule.size() == 2,
                    "{}: each '{}' rule must be a map with exactly 'pattern' and 'format'", ruleAt, key.path);
          APS_CHECK(rule["pattern"].IsScalar(), "{}: '{}' rule pattern must be a string", ruleAt, key.path);
          checkFormat(key, rule["format"], origin(key, rule["format"]));
        }
        break;
    }
  }

  // Where a value came from: its --set, or its file (the config or one of its bases) and line.
  std::string origin(const ConfigKey& key, const YAML::Node& node) const {
    if (const auto it = overrides_.find(key.path); it != overrides_.end()) return it->second;
    const auto file = files_.find(key.path);
    return where(file != files_.end() ? file->second : source_, node);
  }

 private:
  static double number(const ConfigKey& key, const YAML::Node& node, const std::string& at) {
    double v = 0;
    APS_CHECK(node.IsScalar() && YAML::convert<double>::decode(node, v) && std::isfinite(v),
              "{}: '{}' must be a number, got {}", at, key.path, describe(node));
    return v;
  }

  // A wire format is checked where the config names it, so its error carries the file and line.
  static void checkFormat(const ConfigKey& key, const YAML::Node& node, const std::string& at) {
    try {
      precision::CodecSpec::fromYaml(node);
    } catch (const Error& e) {
      APS_FAIL("{}: '{}': {}", at, key.path, e.what());
    } catch (const YAML::Exception& e) {
      APS_FAIL("{}: '{}': {}", at, key.path, e.msg);
    } catch (const std::exception& e) {  // a number out of range, ...: still an error naming the key
      APS_FAIL("{}: '{}': {}", at, key.path, e.what());
    }
  }

  static void checkRange(const ConfigKey& key, double v, const std::string& at, const YAML::Node& node) {
    if (key.min == 0.0 && key.max == 0.0) return;
    APS_CHECK(v >= key.min && v <= key.max, "{}: '{}' = {} is out of range [{}, {}]", at, key.path,
              shorten(node.Scalar()), key.min, key.max);
  }

  std::string source_;
  std::map<std::string, std::string> files_;      // key path -> file that gave its value
  std::map<std::string, std::string> overrides_;  // key path -> "--set key=value"
};

// Every field from the resolved tree, each by its schema key's setter.
// Then the float wire formats that name no rounding of their own take precision.rounding
// (parallel.activation_format keeps its own: round to nearest unless it names one).
void fill(TrainConfig& c) {
  for (const auto& key : configSchema()) key.set(c, nodeAt(c.resolved, key.path));
  const auto withConfigRounding = [&c](WireFormatChoice& f) {
    if (f.spec.kind == precision::CodecSpec::Kind::Float && !f.ownRounding) f.spec.rounding = c.precision.rounding;
  };
  withConfigRounding(c.precision.format);
  for (auto& rule : c.precision.hybrid) withConfigRounding(rule.format);
}

// A config file's text. yaml-cpp would read a UTF-16/32 file, or one with NUL bytes, as a
// stream of odd characters: those are refused by name.
std::string readConfigText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  APS_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  APS_CHECK(!in.bad(), "cannot read config file '{}'", path);
  const auto startsWith = [&](std::initializer_list<unsigned char> bom) {
    return text.size() >= bom.size() && std::equal(bom.begin(), bom.end(), text.begin(), [](unsigned char b, char c) {
             return b == static_cast<unsigned char>(c);
           });
  };
  const bool utf32 = startsWith({0xFF, 0xFE, 0x00, 0x00}) || startsWith({0x00, 0x00, 0xFE, 0xFF});
  const bool utf16 = !utf32 && (startsWith({0xFF, 0xFE}) || startsWith({0xFE, 0xFF}));
  APS_CHECK(!utf16 && !utf32,
            "config '{}' is {} encoded; aps reads UTF-8 YAML (convert it: iconv -f {} -t UTF-8 '{}' > new.yaml)", path,
            utf16 ? "UTF-16" : "UTF-32", utf16 ? "UTF-16" : "UTF-32", path);
  const auto nul = text.find('\0');
  APS_CHECK(nul == std::string::npos,
            "config '{}' holds a NUL byte at offset {}: not a UTF-8 text file (UTF-16 without a byte-order mark?)",
            path, nul);
  if (startsWith({0xEF, 0xBB, 0xBF})) text.erase(0, 3);  // a UTF-8 byte-order mark is harmless
  return text;
}

// One file's YAML: its top-level map of keys.
YAML::Node parseMap(const std::string& yamlText, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(yamlText);
  } catch (const YAML::Exception& e) {
    APS_FAIL("{}:{}: invalid YAML: {}", name, e.mark.line + 1, e.msg);
  }
  // An empty file would train a whole run on defaults: almost certainly the wrong file.
  APS_CHECK(root.IsDefined() && !root.IsNull(),
            "{}: the config is empty (no keys); write '{{}}' to train with every default", name);
  APS_CHECK(root.IsMap(), "{}: the config must be a map of keys, got {}", name,
            root.IsSequence() ? "a list" : fmt::format("the text '{}'", shorten(root.Scalar())));
  return root;
}

// The files a config's `base:` names (one name or a list), as their nodes, for messages. A
// number, a boolean or an empty name is no file name (quote a file that is named "1").
std::vector<YAML::Node> baseEntries(const YAML::Node& root, const std::string& name) {
  const YAML::Node base = root["base"];
  if (!base.IsDefined()) return {};
  const auto isFileName = [](const YAML::Node& node) {
    if (!node.IsScalar() || node.Scalar().empty()) return false;
    if (node.Tag() != "?") return true;  // quoted: a string whatever it reads
    double number = 0;
    bool flag = false;
    return !YAML::convert<double>::decode(node, number) && !YAML::convert<bool>::decode(node, flag);
  };
  std::vector<YAML::Node> entries;
  if (base.IsSequence()) {
    for (const auto& entry : base) entries.push_back(entry);
  } else {
    entries.push_back(base);
  }
  for (const auto& entry : entries) {
    APS_CHECK(isFileName(entry), "{}: 'base' must name config files (a file name or a list of file names), got {}",
              where(name, entry), describe(entry));
  }
  return entries;
}

// A file's identity, to find bases that include each other: its canonical path.
std::filesystem::path fileIdentity(const std::string& file) {
  std::error_code ec;
  const auto canonical = std::filesystem::weakly_canonical(file, ec);
  return ec ? std::filesystem::absolute(file, ec).lexically_normal() : canonical;
}

// Composes a config from its bases, as mmsegmentation's `_base_`: each file's keys are checked
// under its own name; its bases (paths relative to its folder) are merged first, left to right
// and recursively; then its own keys over them. Sections merge key by key; a key's value (a
// scalar, a list, a format map) replaces the base's whole. The file each value came from is
// kept for messages: nodes keep their marks (lines), files() names their file.
class Composer {
 public:
  void add(const YAML::Node& root, const std::string& name) {
    checkKeys(root, "", name);
    chain_.push_back({name, fileIdentity(name)});
    for (const auto& entry : baseEntries(root, name)) addBase(entry, name);
    chain_.pop_back();
    merge(tree_, root, "", name);
  }

  YAML::Node tree() const { return tree_; }
  const std::map<std::string, std::string>& files() const { return files_; }

 private:
  struct Link {
    std::string name;
    std::filesystem::path identity;
  };

  void addBase(const YAML::Node& entry, const std::string& includer) {
    const std::string& written = entry.Scalar();
    const std::string at = where(includer, entry);
    const std::string path = (std::filesystem::path(includer).parent_path() / written).lexically_normal().string();
    std::error_code ec;
    APS_CHECK(std::filesystem::exists(path, ec), "{}: base '{}' does not exist{}", at, shorten(written),
              path == written ? "" : fmt::format(" (looked for '{}')", shorten(path)));
    APS_CHECK(std::filesystem::is_regular_file(path, ec), "{}: base '{}' is not a YAML file ('{}')", at,
              shorten(written), shorten(path));
    const auto identity = fileIdentity(path);
    const auto loop = std::find_if(chain_.begin(), chain_.end(), [&](const Link& l) { return l.identity == identity; });
    if (loop != chain_.end()) {
      std::string cycle;
      for (auto it = loop; it != chain_.end(); ++it) cycle += it->name + " -> ";
      APS_FAIL("{}: the bases form a cycle: {}{}", at, cycle, path);
    }
    add(parseMap(readConfigText(path), path), path);
  }

  // Merges `src` (a checked map from `file`) at `prefix` into `dst`.
  void merge(YAML::Node& dst, const YAML::Node& src, const std::string& prefix, const std::string& file) {
    for (const auto& entry : src) {
      const std::string key = entry.first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (path == "base") continue;
      if (!isConfigSection(path)) {
        dst[key] = entry.second;  // the file's own node: it keeps its line
        files_[path] = file;
        continue;
      }
      if (!entry.second.IsMap()) continue;  // an empty section ("model:") overrides nothing
      if (!dst[key].IsMap()) dst[key] = YAML::Node(YAML::NodeType::Map);
      YAML::Node section = dst[key];
      merge(section, entry.second, path, file);
    }
  }

  YAML::Node tree_{YAML::NodeType::Map};
  std::map<std::string, std::string> files_;  // key path -> the file that set it last
  std::vector<Link> chain_;                   // the file being composed and those including it
};

}  // namespace

namespace {

// comm.algorithm: hierarchical and comm.group_size (docs/ALGORITHMS.md, Hierarchical APS). The
// world size under mpi is only known at run time; GradientSync checks the group size against it.
void checkHierarchical(const TrainConfig& config, const std::string& name) {
  const auto& c = config.comm;
  const auto& p = config.precision;
  if (c.algorithm != CommAlgorithm::Hierarchical) {
    APS_CHECK(c.groupSize == 0,
              "{}: 'comm.group_size' = {} applies to comm.algorithm: hierarchical only (comm.algorithm is '{}')", name,
              c.groupSize, commAlgorithmName(c.algorithm));
    return;
  }
  APS_CHECK(c.groupSize >= 1,
            "{}: comm.algorithm: hierarchical needs 'comm.group_size', the ranks per group (it must divide the world "
            "size; G = N or G = 1 is the flat two_shot reduction)",
            name);
  APS_CHECK(c.backend != "sim" || (c.groupSize <= c.worldSize && c.worldSize % c.groupSize == 0),
            "{}: 'comm.group_size' = {} must divide 'comm.world_size' = {} (comm.algorithm: hierarchical)", name,
            c.groupSize, c.worldSize);
  APS_CHECK(!p.errorFeedback,
            "{}: precision.error_feedback is not available with comm.algorithm: hierarchical (its residual is measured "
            "against one quantisation, the hierarchy has two)",
            name);
  APS_CHECK(p.scaling != precision::ScalingMode::Fp8Lm,
            "{}: precision.scaling = '{}' (FP8-LM's mu) is not available with comm.algorithm: hierarchical; use aps, "
            "global, block or none",
            name, precision::scalingModeName(p.scaling));
  APS_CHECK(!p.hybridAuto,
            "{}: precision.hybrid_auto is not available with comm.algorithm: hierarchical (the quantisation statistics "
            "it decides from are not measured there); give fixed precision.hybrid rules instead",
            name);
}

// parallel.model_parallel (docs/ALGORITHMS.md, Model parallelism): what it combines with. The
// world size under mpi is only known at run time; the trainer checks M against it.
void checkModelParallel(const TrainConfig& config, const std::string& name) {
  const auto& mp = config.parallel;
  const auto& p = config.precision;
  if (mp.modelParallel == 1) {
    APS_CHECK(mp.split.empty(),
              "{}: 'parallel.split' names layers to split but 'parallel.model_parallel' = 1: set it to the ranks that "
              "share a split layer (2, 4, ...)",
              name);
    return;
  }
  APS_CHECK(!mp.split.empty(),
            "{}: 'parallel.model_parallel' = {} but 'parallel.split' is empty: name the linear layers to split "
            "(e.g. ['fc1', 'fc2'])",
            name, mp.modelParallel);
  APS_CHECK(config.comm.backend != "sim" || config.comm.worldSize % mp.modelParallel == 0,
            "{}: 'parallel.model_parallel' = {} must divide 'comm.world_size' = {} (the world is data-parallel groups "
            "x model-parallel ranks)",
            name, mp.modelParallel, config.comm.worldSize);
  APS_CHECK(config.device == "cpu", "{}: 'parallel.model_parallel' runs on the cpu only (device is '{}')", name,
            config.device);
  APS_CHECK(p.compute.isFp32(), "{}: 'parallel.model_parallel' needs precision.compute: fp32 (it is '{}')", name,
            p.compute.name());
  APS_CHECK(config.comm.algorithm != CommAlgorithm::Hierarchical,
            "{}: 'parallel.model_parallel' and comm.algorithm: hierarchical do not combine (the data-parallel groups "
            "are already a sub-world); use two_shot, ring or allgather",
            name);
  APS_CHECK(!p.errorFeedback && !p.hybridAuto && p.scaling != precision::ScalingMode::Fp8Lm,
            "{}: 'parallel.model_parallel' does not combine with precision.error_feedback, hybrid_auto or scaling: "
            "fp8lm (their state is per rank and the split layers' gradients are reduced apart)",
            name);
}

// checkpoint.keep_best and eval.early_stopping watch the evaluations during training.
void checkEvaluations(const TrainConfig& config, const std::string& name) {
  const bool watching = config.checkpoint.keepBest || config.eval.earlyStopping > 0;
  APS_CHECK(!watching || config.evalIntervalEpochs > 0,
            "{}: {} watches the evaluations during training, but 'eval.interval_epochs' = 0 evaluates only at the end; "
            "set it to 1 (every epoch) or more",
            name, config.checkpoint.keepBest ? "'checkpoint.keep_best'" : "'eval.early_stopping'");
}

void checkSegmentationCanvas(const TrainConfig& config, const std::string& name) {
  if (config.data.dataset == "fashion_mnist_seg") return;
  using Seg = data::FashionMnistSegmentation;
  for (const auto& [key, value, fallback] :
       {std::tuple<const char*, int64_t, int64_t>{"data.canvas", config.data.canvas, Seg::kDefaultCanvas},
        {"data.max_items", config.data.maxItems, Seg::kDefaultMaxItems}}) {
    APS_CHECK(value == fallback, "{}: '{}' = {} shapes the fashion_mnist_seg canvases, but data.dataset is '{}'", name,
              key, value, config.data.dataset);
  }
}

}  // namespace

Launcher detectLauncher() {
  for (const auto& [variable, name] : {std::pair<const char*, const char*>{"OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"},
                                       {"SLURM_STEP_NUM_TASKS", "srun (Slurm)"},
                                       {"PMI_SIZE", "a PMI launcher (PMI_SIZE)"}}) {
    const char* value = std::getenv(variable);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && n >= 1 && n <= INT32_MAX) return {static_cast<int>(n), name};
  }
  return {};
}

namespace {
// A launch of several processes makes each one a rank: the file's simulator settings give way
// (loadConfig's comment); applied when no --set names comm.backend. Returns the note for the
// log, or "".
std::string applyLauncher(YAML::Node& root, const Launcher& launcher, bool keepWorldSize) {
  if (launcher.processes <= 1) return "";
  const YAML::Node backend = nodeAt(root, "comm.backend");
  const std::string given = backend.IsDefined() && backend.IsScalar() ? backend.as<std::string>() : "sim";
  if (given == "mpi" || given == "nccl") return "";
  const YAML::Node world = nodeAt(root, "comm.world_size");
  const std::string worldText = world.IsDefined() && world.IsScalar() ? world.as<std::string>() : "1";
  setPath(root, "comm.backend", YAML::Node("mpi"));
  if (!keepWorldSize) setPath(root, "comm.world_size", YAML::Node(1));  // a --set of it stays, and is checked
  return fmt::format(
      "comm.backend: mpi, {} ranks (launched by {}); the config's comm.backend: {} with world_size {} "
      "does not apply to a multi-process launch",
      launcher.processes, launcher.name, given, worldText);
}
}  // namespace

TrainConfig parseConfig(const std::string& yamlText, const std::string& name, const std::vector<std::string>& overrides,
                        const Launcher& launcher) {
  Composer composer;
  composer.add(parseMap(yamlText, name), name);
  YAML::Node root = composer.tree();
  Validator validator(name, composer.files());
  std::string commOverrides;  // the --set of comm.backend and comm.world_size, as given
  bool backendSet = false, worldSet = false;
  for (const auto& text : overrides) {
    const std::string path = applyOverride(root, text);
    validator.setOrigin(path, text);
    backendSet |= path == "comm.backend";
    worldSet |= path == "comm.world_size";
    if (path == "comm.backend" || path == "comm.world_size") {
      commOverrides += (commOverrides.empty() ? "" : " --set ") + shorten(text);
    }
  }
  const std::string launched = backendSet ? "" : applyLauncher(root, launcher, worldSet);

  TrainConfig config;
  config.sourceFile = name;
  config.resolved = YAML::Node(YAML::NodeType::Map);
  // Every value is checked before any error is reported: one report names them all.
  std::vector<std::string> errors;
  std::exception_ptr first;
  for (const auto& key : configSchema()) {
    const YAML::Node value = validator.valueOf(root, key);
    try {
      validator.checkValue(key, value);
    } catch (const Error& e) {
      errors.emplace_back(e.what());
      if (!first) first = std::current_exception();
    }
    setPath(config.resolved, key.path, YAML::Clone(value));
  }
  APS_CHECK(errors.size() <= 1, "{} errors in the config:\n  {}", errors.size(), fmt::join(errors, "\n  "));
  if (first) std::rethrow_exception(first);
  fill(config);
  if (config.schedule.name == "multistep") {
    const ConfigKey& milestones = *findConfigKey("schedule.milestones");
    for (size_t i = 1; i < config.schedule.milestones.size(); ++i) {
      APS_CHECK(config.schedule.milestones[i] > config.schedule.milestones[i - 1],
                "{}: 'schedule.milestones' must increase, got {}",
                validator.origin(milestones, validator.valueOf(root, milestones)),
                fmt::join(config.schedule.milestones, ", "));
    }
  }
  APS_CHECK(launcher.processes <= 1 || config.comm.backend != "sim" || config.comm.worldSize == 1,
            "{}: --set {} asks for comm.backend: sim with world_size {} under {} with {} processes: each process would "
            "simulate the whole job on its own, into the same run folder; drop the --set to train as {} real ranks "
            "(comm.backend: mpi), or run the simulation without the launcher",
            name, commOverrides, config.comm.worldSize, launcher.name, launcher.processes, launcher.processes);
  if (!launched.empty() && config.comm.backend == "mpi") spdlog::info("{}", launched);
  APS_CHECK(config.comm.backend == "sim" || config.comm.worldSize == 1,
            "{}: 'comm.world_size' = {} applies to the sim backend only (under mpi the world is mpirun's -np)", name,
            config.comm.worldSize);
  checkHierarchical(config, name);
  checkModelParallel(config, name);
  checkEvaluations(config, name);
  checkSegmentationCanvas(config, name);
  APS_CHECK(config.comm.backend != "nccl" || config.device.starts_with("cuda"),
            "{}: comm.backend = 'nccl' moves gradients between GPUs and needs device: cuda (device is '{}'); use mpi "
            "on cpus",
            name, config.device);
  try {
    parseDevice(config.device);
  } catch (const Error& e) {
    APS_FAIL("{}: 'device': {}", name, e.what());
  }
  return config;
}

TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  APS_CHECK(!path.empty(), "--config needs a file name");
  APS_CHECK(std::filesystem::exists(path, ec), "config file '{}' does not exist", path);
  APS_CHECK(!std::filesystem::is_directory(path, ec), "config '{}' is a directory, not a YAML file", path);
  return parseConfig(readConfigText(path), path, overrides, detectLauncher());
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

std::string resumeYaml(const TrainConfig& config) {
  YAML::Node tree = YAML::Clone(config.resolved);
  // device, cuda: a checkpoint resumes on another device (the same file from the CPU and a GPU).
  for (const char* key :
       {"epochs", "max_steps", "checkpoint", "logging", "eval", "threads", "output_dir", "device", "cuda"}) {
    tree.remove(key);
  }
  tree["comm"].remove("sim_workers");  // how simulated ranks share the cores, not what they compute
  tree["data"].remove("workers");
  tree["data"].remove("prefetch");
  tree["model"].remove("init_from");  // a resumed run loads its weights from the checkpoint
  tree["model"].remove("init_map");
  // How the model is split over ranks, not what it learns: a checkpoint (whole weights) resumes
  // with another parallel.model_parallel, and the data-parallel world is what comm.world_size
  // means to it (D = world_size / M).
  if (config.parallel.modelParallel > 1 && tree["comm"]["world_size"]) {
    tree["comm"]["world_size"] = config.comm.worldSize / config.parallel.modelParallel;
  }
  tree.remove("parallel");
  YAML::Emitter out;
  out << tree;
  return out.c_str();
}

uint64_t resumeHash(const TrainConfig& config) { return fnv1a(resumeYaml(config)); }

namespace {

// Leaf keys of a YAML tree as "a.b.c" -> the value's YAML text.
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

std::map<std::string, std::string> flatYaml(const std::string& text, const char* what) {
  std::map<std::string, std::string> out;
  try {
    flatten(YAML::Load(text), "", out);
  } catch (const YAML::Exception& e) {
    APS_FAIL("{} is not a YAML config: {}", what, e.what());
  }
  return out;
}

}  // namespace

std::vector<std::string> configDifferences(const std::string& checkpointYaml, const std::string& runYaml) {
  auto saved = flatYaml(checkpointYaml, "the checkpoint's stored config");
  saved.erase("device");  // stored by aps before a checkpoint could move between devices
  const auto now = flatYaml(runYaml, "this run's config");
  const auto defaults = flatYaml(resumeYaml(parseConfig("{}", "defaults")), "the default config");
  std::vector<std::string> out;
  for (const auto& [key, value] : now) {
    const auto it = saved.find(key);
    if (it != saved.end() && it->second != value) {
      out.push_back(fmt::format("{}: {} in the checkpoint, {} here", key, it->second, value));
    } else if (it == saved.end() && (!defaults.count(key) || defaults.at(key) != value)) {
      out.push_back(fmt::format("{}: not in the checkpoint (older aps), {} here", key, value));
    }
  }
  for (const auto& [key, value] : saved) {
    if (!now.count(key)) out.push_back(fmt::format("{}: {} in the checkpoint, unknown here", key, value));
  }
  return out;
}

}  // namespace aps::train
