#include "framework/train/Config.h"

#include "framework/core/Error.h"
#include "framework/train/ConfigSchema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

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

class Validator {
 public:
  explicit Validator(std::string source) : source_(std::move(source)) {}

  // Values set by --set are reported as "--set key=value", not at a line of the file.
  void setOrigin(const std::string& path, const std::string& overrideText) {
    origins_[path] = "--set " + shorten(overrideText);
  }

  void checkKeys(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> seen;  // key -> line: yaml-cpp keeps duplicates, lookups see the first
    for (const auto& entry : map) {
      APS_CHECK(entry.first.IsScalar(), "{}: a key under '{}' is {}, not a name", where(source_, entry.first),
                prefix.empty() ? "the top level" : prefix, describe(entry.first));
      const std::string key = entry.first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      const auto [first, inserted] = seen.emplace(key, entry.first.Mark().line + 1);
      APS_CHECK(inserted, "{}: '{}' is given twice (first at line {}); remove one of them", where(source_, entry.first),
                shorten(path), first->second);
      if (const ConfigKey* leaf = findConfigKey(path)) {
        // "lr:" or "lr: ~" would silently become the default: say so instead.
        APS_CHECK(!entry.second.IsNull(), "{}: '{}' has no value; give one or delete the line for the default ({})",
                  where(source_, entry.first), path, leaf->defaultValue);
        continue;
      }
      if (isConfigSection(path)) {
        APS_CHECK(entry.second.IsMap() || entry.second.IsNull(), "{}: '{}' is a section and must be a map",
                  where(source_, entry.first), path);
        if (entry.second.IsMap()) checkKeys(entry.second, path);
        continue;
      }
      APS_FAIL("{}: unknown key '{}'{}", where(source_, entry.first), shorten(path), hint(path));
    }
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
          APS_FAIL("{}: '{}' must be one of {}, got '{}'", at, key.path, fmt::join(key.choices, ", "), shorten(v));
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
      case ValueKind::Format:
        APS_CHECK(node.IsScalar() || node.IsMap(), "{}: '{}' must be a format name or a map, got {}", at, key.path,
                  describe(node));
        break;
      case ValueKind::RuleList:
        APS_CHECK(node.IsSequence(), "{}: '{}' must be a list of {{pattern, format}} rules, got {}", at, key.path,
                  describe(node));
        for (const auto& rule : node) {
          const std::string ruleAt = origin(key, rule);
          APS_CHECK(rule.IsMap() && rule["pattern"] && rule["format"] && rule.size() == 2,
                    "{}: each '{}' rule must be a map with exactly 'pattern' and 'format'", ruleAt, key.path);
          APS_CHECK(rule["pattern"].IsScalar(), "{}: '{}' rule pattern must be a string", ruleAt, key.path);
        }
        break;
    }
  }

 private:
  // Where a value came from: its --set, or its file and line.
  std::string origin(const ConfigKey& key, const YAML::Node& node) const {
    const auto it = origins_.find(key.path);
    return it != origins_.end() ? it->second : where(source_, node);
  }

  static std::string describe(const YAML::Node& node) {
    if (node.IsScalar()) return fmt::format("'{}'", shorten(node.Scalar()));
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
    APS_CHECK(v >= key.min && v <= key.max, "{}: '{}' = {} is out of range [{}, {}]", at, key.path,
              shorten(node.Scalar()), key.min, key.max);
  }

  std::string source_;
  std::map<std::string, std::string> origins_;
};

// Every field from the resolved tree, each by its schema key's setter.
void fill(TrainConfig& c) {
  for (const auto& key : configSchema()) key.set(c, nodeAt(c.resolved, key.path));
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
  // An empty file would train a whole run on defaults: almost certainly the wrong file.
  APS_CHECK(root.IsDefined() && !root.IsNull(),
            "{}: the config is empty (no keys); write '{{}}' to train with every default", name);
  APS_CHECK(root.IsMap(), "{}: the config must be a map of keys, got {}", name,
            root.IsSequence() ? "a list" : fmt::format("the text '{}'", shorten(root.Scalar())));
  Validator validator(name);
  validator.checkKeys(root, "");
  for (const auto& text : overrides) validator.setOrigin(applyOverride(root, text), text);

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
  std::error_code ec;
  APS_CHECK(!path.empty(), "--config needs a file name");
  APS_CHECK(std::filesystem::exists(path, ec), "config file '{}' does not exist", path);
  APS_CHECK(!std::filesystem::is_directory(path, ec), "config '{}' is a directory, not a YAML file", path);
  std::ifstream in(path, std::ios::binary);
  APS_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  APS_CHECK(!in.bad(), "cannot read config file '{}'", path);
  // yaml-cpp reads a UTF-16/32 file as a stream of odd characters: refuse it by name.
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
  return parseConfig(text, path, overrides);
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
  for (const char* key : {"epochs", "max_steps", "checkpoint", "logging", "eval", "threads", "output_dir"}) {
    tree.remove(key);
  }
  tree["data"].remove("workers");
  tree["data"].remove("prefetch");
  tree["model"].remove("init_from");  // a resumed run loads its weights from the checkpoint
  tree["model"].remove("init_map");
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

std::map<std::string, std::string> flatYaml(const std::string& text) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(text), "", out);
  return out;
}

}  // namespace

std::vector<std::string> configDifferences(const std::string& checkpointYaml, const std::string& runYaml) {
  const auto saved = flatYaml(checkpointYaml), now = flatYaml(runYaml);
  const auto defaults = flatYaml(resumeYaml(parseConfig("{}", "defaults")));
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
