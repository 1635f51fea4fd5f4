#include "precision/HybridPolicy.h"

#include "framework/core/Error.h"

#include <yaml-cpp/yaml.h>

#include <cmath>

namespace aps::precision {

namespace {

double dynamicRange(const FloatFormat& f) {
  return std::log2(static_cast<double>(f.maxValue())) - std::log2(static_cast<double>(f.minSubnormal()));
}

}  // namespace

HybridPolicy::HybridPolicy(FloatFormat defaultFormat, std::vector<Rule> rules, AutoWiden autoWiden)
    : default_(std::move(defaultFormat)), rules_(std::move(rules)), auto_(autoWiden) {
  default_.validate();
  for (const auto& r : rules_) {
    APS_CHECK(!r.pattern.empty(), "hybrid precision: a rule has an empty pattern");
    r.format.validate();
  }
}

HybridPolicy HybridPolicy::fromYaml(const YAML::Node& node) {
  APS_CHECK(node.IsMap(), "hybrid precision: expected a map");
  FloatFormat def = FloatFormat::preset("fp32");
  std::vector<Rule> rules;
  AutoWiden autoWiden;
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (key == "default") {
      def = FloatFormat::fromYaml(kv.second);
    } else if (key == "layers") {
      APS_CHECK(kv.second.IsSequence(), "hybrid precision: layers must be a list");
      for (const auto& rule : kv.second) {
        APS_CHECK(rule["pattern"] && rule["format"], "hybrid precision: each layers entry needs pattern and format");
        rules.push_back({rule["pattern"].as<std::string>(), FloatFormat::fromYaml(rule["format"])});
      }
    } else if (key == "auto_widen") {
      for (const auto& a : kv.second) {
        const auto k = a.first.as<std::string>();
        if (k == "enabled") {
          autoWiden.enabled = a.second.as<bool>();
        } else if (k == "underflow") {
          autoWiden.underflowThreshold = a.second.as<double>();
        } else if (k == "saturation") {
          autoWiden.saturationThreshold = a.second.as<double>();
        } else {
          APS_FAIL("hybrid precision: unknown key auto_widen.{}", k);
        }
      }
    } else {
      APS_FAIL("hybrid precision: unknown key '{}'", key);
    }
  }
  return HybridPolicy(def, rules, autoWiden);
}

bool HybridPolicy::globMatch(const std::string& pattern, const std::string& name) {
  // Iterative wildcard match with backtracking to the last '*'.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const FloatFormat& HybridPolicy::match(const std::string& name) const {
  for (const auto& r : rules_) {
    if (globMatch(r.pattern, name)) return r.format;
  }
  return default_;
}

void HybridPolicy::assign(const std::vector<std::string>& names) {
  assigned_.clear();
  for (const auto& n : names) assigned_.push_back(match(n));
}

FloatFormat HybridPolicy::widen(const FloatFormat& format) {
  const double range = dynamicRange(format);
  for (const char* name : {"e2m1", "e3m0", "e4m3", "e5m2", "bf16", "fp32"}) {
    FloatFormat candidate = FloatFormat::preset(name);
    if (candidate.bits() >= format.bits() && dynamicRange(candidate) > range) {
      if (format.overflow == Overflow::Saturate && candidate.specials != Specials::None) {
        candidate.overflow = Overflow::Saturate;  // keep the layer's overflow policy
      }
      return candidate;
    }
  }
  return format;
}

void HybridPolicy::widenLayer(size_t layer) { assigned_.at(layer) = widen(assigned_.at(layer)); }

std::vector<size_t> HybridPolicy::adapt(LayerStatistics& stats) {
  std::vector<size_t> widened;
  if (!auto_.enabled) return widened;
  APS_CHECK(stats.layers() == assigned_.size(), "hybrid precision: statistics for {} layers, policy has {}",
            stats.layers(), assigned_.size());
  for (size_t l = 0; l < assigned_.size(); ++l) {
    if (stats.steps(l) < stats.windowSize()) continue;
    const QuantizationCounts w = stats.window(l);
    if (w.flushedFraction() > auto_.underflowThreshold || w.saturatedFraction() > auto_.saturationThreshold) {
      FloatFormat wider = widen(assigned_[l]);
      if (!(wider == assigned_[l])) {
        assigned_[l] = wider;
        widened.push_back(l);
      }
      stats.reset(l);
    }
  }
  return widened;
}

}  // namespace aps::precision
