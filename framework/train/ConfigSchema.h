#pragma once

#include "framework/train/Config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace aps::train {

// The kinds of value a config key holds.
enum class ValueKind {
  Int,
  Float,
  Bool,
  String,
  Enum,      // a string from `choices`
  IntList,   // a sequence of integers
  Format,    // a number format: a preset name or a map {exponent_bits, ...} (validated by precision/)
  RuleList,    // hybrid precision rules: a sequence of {pattern, format}
  StringList,  // a sequence of strings
};

// Stores a key's validated value into its TrainConfig field.
using ConfigSetter = std::function<void(TrainConfig&, const YAML::Node&)>;

// One key of the aps_train YAML schema, declared once: its dotted path, kind, default (YAML
// text), the allowed range or choices, a one-line description for --print-config and docs,
// and the TrainConfig field it sets. Validation, defaults, the resolved tree (--print-config,
// the config hashes) and the TrainConfig all come from this one declaration.
struct ConfigKey {
  std::string path;
  ValueKind kind;
  std::string defaultValue;
  double min = 0.0;
  double max = 0.0;  // min == max == 0: no range check
  std::vector<std::string> choices;
  std::string help;
  ConfigSetter set;
};

// Every key aps_train understands, in the order --print-config prints them.
const std::vector<ConfigKey>& configSchema();

// aps_train --help-config [KEY]: every key whose path is KEY or lies in section KEY (all when
// empty), one block each: path, kind, default, range or choices, and its help. Throws
// aps::Error naming KEY, with a "did you mean", when nothing matches.
std::string describeConfigKeys(const std::string& key = "");

// The key with this exact path, or nullptr.
const ConfigKey* findConfigKey(const std::string& path);

// Keys whose path starts with prefix + "." (a section).
bool isConfigSection(const std::string& path);

// The closest known path to `path` (edit distance on the last component and on the whole
// path), or "" when nothing is close: for "did you mean" hints.
std::string closestConfigKey(const std::string& path);

}  // namespace aps::train
