// aps_formats: inspect the low-precision float formats: their limits, every value, what
// they make of given numbers, and their rounding error on random data.
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/ApsScaler.h"
#include "precision/FloatFormat.h"
#include "precision/Quantizer.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace {

using aps::precision::FloatFormat;
using aps::precision::Quantizer;
using aps::precision::RoundingMode;

// A preset name ("e4m3") or a YAML map ("{exponent_bits: 3, mantissa_bits: 4}").
FloatFormat parseFormat(const std::string& text) {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    APS_FAIL("format '{}' is neither a preset name nor a YAML map: {}", text, e.what());
  }
  return FloatFormat::fromYaml(node);
}

std::string g9(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void info(const FloatFormat& f) {
  fmt::print("format: {}\n", f.describe());
  fmt::print("bits: {}\n", f.bits());
  fmt::print("bias: {}\n", f.bias);
  fmt::print("max: {}\n", g9(f.maxValue()));
  fmt::print("min_normal: {}\n", g9(f.minNormal()));
  fmt::print("min_subnormal: {}\n", g9(f.minSubnormal()));
  fmt::print("epsilon: {}\n", g9(f.epsilon()));
  fmt::print("finite_values: {}\n", f.finiteCount());
  fmt::print("inf: {}\nnan: {}\n", f.hasInf() ? "yes" : "no", f.hasNan() ? "yes" : "no");
  // APS's headroom for N summands costs log2(N) binades of the range (docs/ALGORITHMS.md).
  fmt::print("aps_max_ranks: {:.0f}\n", aps::precision::ApsScaler::maxRanks(f));
}

void table(const FloatFormat& f) {
  APS_CHECK(f.bits() <= 8, "table: format {} has {} bits; only formats of <= 8 bits are listed", f.name, f.bits());
  const int bits = f.bits();
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    std::string binary;
    for (int b = bits - 1; b >= 0; --b) {
      binary += (c >> b) & 1u ? '1' : '0';
      if (b == f.exponentBits + f.mantissaBits || (b == f.mantissaBits && f.mantissaBits > 0)) binary += '.';
    }
    fmt::print("0x{:02x} {} {}\n", c, binary, g9(f.decode(c)));
  }
}

// One output line per input line: a blank input line gives a blank output line, and line i
// (0-based, blank lines counted) rounds stochastically with randomBits32(seed, 0, i), so the
// result of a number does not depend on the blank lines above it.
void quantize(const FloatFormat& f, RoundingMode mode, uint64_t seed) {
  const Quantizer q(f);
  std::string line;
  for (uint64_t index = 0; std::getline(std::cin, line); ++index) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) {
      std::printf("\n");
      continue;
    }
    const auto last = line.find_last_not_of(" \t\r");
    const std::string text = line.substr(first, last - first + 1);
    const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    char* end = nullptr;
    errno = 0;
    const float x = std::strtof(text.c_str(), &end);
    APS_CHECK(end == text.c_str() + text.size() && end != text.c_str(),
              "quantize: line {}: '{}' is not a decimal number", index + 1, shown);
    // strtof saturates 1e999 to inf (ERANGE): a number outside float's range is an input
    // error, not infinity (write 'inf' for that). Underflow to zero or a subnormal is fine.
    APS_CHECK(!(errno == ERANGE && std::isinf(x)),
              "quantize: line {}: '{}' is outside the float range (magnitude up to 3.40282347e+38; write inf for "
              "infinity)",
              index + 1, shown);
    const uint32_t bits = aps::randomBits32(seed, 0, index);
    const float y = q.quantize(x, mode, bits);
    if (std::isnan(y)) {
      std::printf("nan\n");  // never "-nan": NaN has no sign a user can rely on
    } else {
      std::printf("%.9g\n", static_cast<double>(y));
    }
  }
}

void errorStats(const FloatFormat& f, const std::string& dist, int64_t count, uint64_t seed, RoundingMode mode) {
  APS_CHECK(dist == "normal" || dist == "uniform", "error: --dist '{}' is unknown (normal, uniform)", dist);
  APS_CHECK(count > 0, "error: --count {} must be > 0", count);
  aps::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(count)), q(x.size());
  for (auto& v : x) v = dist == "normal" ? rng.normal() : 2.0f * rng.uniform() - 1.0f;
  Quantizer(f).quantize(x.data(), q.data(), count, mode, {seed, 1, 0});
  double absSum = 0, sq = 0, relSum = 0, relMax = 0, bias = 0;
  int64_t relCount = 0, flushed = 0, saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(q[i]) - x[i];
    if (!std::isfinite(q[i]) || std::fabs(q[i]) >= f.maxValue()) ++saturated;
    if (x[i] != 0.0f && q[i] == 0.0f) ++flushed;
    if (!std::isfinite(d)) continue;
    absSum += std::fabs(d);
    sq += d * d;
    bias += d;
    if (x[i] != 0.0f) {
      const double r = std::fabs(d) / std::fabs(x[i]);
      relSum += r;
      relMax = std::max(relMax, r);
      ++relCount;
    }
  }
  const double n = static_cast<double>(count);
  fmt::print("format: {}\ndist: {}\nrounding: {}\ncount: {}\n", f.describe(), dist,
             aps::precision::roundingModeName(mode), count);
  fmt::print("mean_abs_error: {}\nrms_error: {}\nmean_error: {}\n", g9(absSum / n), g9(std::sqrt(sq / n)),
             g9(bias / n));
  fmt::print("mean_relative_error: {}\nmax_relative_error: {}\n", g9(relCount ? relSum / relCount : 0.0), g9(relMax));
  fmt::print("flushed_fraction: {}\nsaturated_fraction: {}\n", g9(flushed / n), g9(saturated / n));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Low-precision float formats: limits, values, quantization and rounding error", "aps_formats"};
  app.require_subcommand(1);
  std::string format, rounding = "nearest", dist = "normal";
  uint64_t seed = 0;
  int64_t count = 1000000;

  auto* infoCmd = app.add_subcommand(
      "info", "bias, max, min normal, min subnormal, epsilon, finite values, the most ranks APS serves");
  infoCmd->add_option("format", format, "preset name or YAML map")->required();
  auto* tableCmd = app.add_subcommand("table", "every code of a format of <= 8 bits and its value");
  tableCmd->add_option("format", format, "preset name or YAML map")->required();
  auto* quantizeCmd = app.add_subcommand("quantize", "quantize one decimal number per stdin line (%.9g)");
  quantizeCmd->add_option("--format", format, "preset name or YAML map")->required();
  quantizeCmd->add_option("--rounding", rounding, "nearest, stochastic or toward_zero");
  quantizeCmd->add_option(
      "--seed", seed,
      "stochastic rounding seed (input line i, from 0, blank lines counted, uses randomBits32(seed, 0, i))");
  auto* errorCmd = app.add_subcommand("error", "rounding error statistics on random data");
  errorCmd->add_option("format", format, "preset name or YAML map")->required();
  errorCmd->add_option("--dist", dist, "normal (N(0,1)) or uniform (U(-1,1))");
  errorCmd->add_option("--count", count, "number of samples");
  errorCmd->add_option("--seed", seed, "random seed");
  errorCmd->add_option("--rounding", rounding, "nearest, stochastic or toward_zero");

  return aps::runTool(app, argc, argv, [&] {
    const FloatFormat f = parseFormat(format);
    const RoundingMode mode = aps::precision::parseRoundingMode(rounding);
    if (*infoCmd) info(f);
    if (*tableCmd) table(f);
    if (*quantizeCmd) quantize(f, mode, seed);
    if (*errorCmd) errorStats(f, dist, count, seed, mode);
  });
}
