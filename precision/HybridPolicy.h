#pragma once

#include "precision/FloatFormat.h"
#include "precision/QuantizationStats.h"

#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace aps::precision {

// Hybrid precision (Han et al. 2021: keeping some layers in higher precision recovers the
// last bit of accuracy): each parameter gets a wire format, chosen by name pattern (glob:
// '*' any run of characters, '?' one; the first matching rule wins; no match: the
// default), optionally widened at run time by the rule below.
//
// Automatic widening (our design; the paper's rule is unconfirmed): once a layer has a
// full window of statistics, if the fraction of its nonzero scaled gradient values that
// flushed to zero exceeds underflowThreshold, or the fraction that saturated exceeds
// saturationThreshold, the layer moves one step up the ladder
//   e2m1 -> e3m0 -> e4m3 -> e5m2 -> bf16 -> fp32,
// i.e. to the first ladder format with at least as many bits and a strictly wider dynamic range
// (log2(max / min subnormal)) than its current one; both underflow (values below the range
// under the APS shift) and saturation (values above it) are range problems. Its window
// restarts, so it moves at most one step per window. Layers never narrow again (a layer
// that needed range once is likely to need it again; no oscillation).
class HybridPolicy {
 public:
  struct Rule {
    std::string pattern;
    FloatFormat format;
  };
  struct AutoWiden {
    bool enabled = false;
    double underflowThreshold = 0.01;
    double saturationThreshold = 1e-4;
  };

  HybridPolicy(FloatFormat defaultFormat, std::vector<Rule> rules, AutoWiden autoWiden);
  explicit HybridPolicy(FloatFormat defaultFormat) : HybridPolicy(std::move(defaultFormat), {}, AutoWiden{}) {}
  // {default: e4m3, layers: [{pattern: "fc.*", format: fp16}, ...],
  //  auto_widen: {enabled: true, underflow: 0.01, saturation: 1e-4}}
  static HybridPolicy fromYaml(const YAML::Node& node);

  // The format a parameter's name resolves to (first matching rule, else the default).
  const FloatFormat& match(const std::string& name) const;
  // Resolves every parameter once (start-up); formatOf(l) then answers per layer.
  void assign(const std::vector<std::string>& names);
  const FloatFormat& formatOf(size_t layer) const { return assigned_.at(layer); }
  size_t layers() const { return assigned_.size(); }

  // Applies the automatic rule to every assigned layer; returns the layers that widened
  // (and restarts their windows in `stats`).
  std::vector<size_t> adapt(LayerStatistics& stats);
  // Moves `layer` one step up the ladder, as adapt() does; data-parallel ranks apply the
  // decisions rank 0 took, so every rank keeps the same formats.
  void widenLayer(size_t layer);

  // The next format up the ladder for `format`; `format` itself when nothing is wider.
  static FloatFormat widen(const FloatFormat& format);
  static bool globMatch(const std::string& pattern, const std::string& name);

 private:
  FloatFormat default_;
  std::vector<Rule> rules_;
  AutoWiden auto_;
  std::vector<FloatFormat> assigned_;
};

}  // namespace aps::precision
