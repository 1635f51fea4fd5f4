// aps_formats: inspect the low-precision float formats and wire codecs (every name
// precision.format takes: the float presets and maps, the OCP MX types, block-scaled formats
// and Dettmers' 8-bit types): their limits, every value, what they make of given numbers, and
// their rounding error on random data.
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/ApsScaler.h"
#include "precision/Codec.h"
#include "precision/CodecSpec.h"
#include "precision/DettmersCodec.h"
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
#include <limits>
#include <string>
#include <vector>

namespace {

using aps::precision::CodecSpec;
using aps::precision::FloatFormat;
using aps::precision::Quantizer;
using aps::precision::RoundingMode;
using Kind = CodecSpec::Kind;

// What precision.format takes: a name ("e4m3", "mxfp4", "e3m0/block32", "dettmers_dynamic",
// "e4m3:stochastic") or a YAML map ("{exponent_bits: 3, mantissa_bits: 4}").
CodecSpec parseSpec(const std::string& text) {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    APS_FAIL("format '{}' is neither a name nor a YAML map: {}", text, e.what());
  }
  return CodecSpec::fromYaml(node);
}

// Bits on the wire per value of a long message (the scales or absmax amortised).
double bitsPerValue(const aps::precision::Codec& codec) {
  constexpr int64_t n = 1 << 20;
  return static_cast<double>(codec.encodedBytes(n)) * 8.0 / static_cast<double>(n);
}

std::string g9(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void info(const FloatFormat& f, const char* prefix = "") {
  fmt::print("{}format: {}\n", prefix, f.describe());
  fmt::print("{}bits: {}\n", prefix, f.bits());
  fmt::print("{}bias: {}\n", prefix, f.bias);
  fmt::print("{}max: {}\n", prefix, g9(f.maxValue()));
  fmt::print("{}min_normal: {}\n", prefix, g9(f.minNormal()));
  fmt::print("{}min_subnormal: {}\n", prefix, g9(f.minSubnormal()));
  fmt::print("{}epsilon: {}\n", prefix, g9(f.epsilon()));
  fmt::print("{}finite_values: {}\n", prefix, f.finiteCount());
  fmt::print("{}inf: {}\n{}nan: {}\n", prefix, f.hasInf() ? "yes" : "no", prefix, f.hasNan() ? "yes" : "no");
  // APS's headroom for N summands costs log2(N) binades of the range (docs/ALGORITHMS.md).
  if (*prefix == '\0') fmt::print("aps_max_ranks: {:.0f}\n", aps::precision::ApsScaler::maxRanks(f));
}

// The type of one of Dettmers' codecs.
aps::precision::DettmersCodec::Type dettmersType(const CodecSpec& spec) {
  using Type = aps::precision::DettmersCodec::Type;
  switch (spec.kind) {
    case Kind::DettmersDynamic:
      return Type::DynamicTree;
    case Kind::DettmersLinear:
      return Type::Linear;
    case Kind::DettmersStatic:
      return Type::StaticTree;
    case Kind::Float:
    case Kind::BlockScaled:
      break;
  }
  APS_FAIL("codec {} is not one of Dettmers' types", aps::precision::makeCodec(spec)->name());
}

// A codec that is more than a float format: what travels, per block, and its element or code values.
void info(const CodecSpec& spec, const std::string& given) {
  const auto codec = aps::precision::makeCodec(spec);
  fmt::print("codec: {}\n", given == codec->name() ? given : given + " (" + codec->name() + ")");
  fmt::print("bits_per_value: {}\n", g9(bitsPerValue(*codec)));
  if (spec.kind == Kind::BlockScaled) {
    fmt::print("kind: block_scaled\nblock_size: {}\n", spec.blockSize);
    fmt::print("scale: e8m0 (one byte per block: a power of two from 2^-127 to 2^127)\n");
    fmt::print("rounding: {}\n", aps::precision::roundingModeName(spec.rounding));
    info(spec.format, "element_");
    return;
  }
  const auto type = dettmersType(spec);
  const auto book = aps::precision::DettmersCodec::codeBookOf(type);
  float smallest = 1.0f;
  int distinct = 0;
  for (size_t c = 0; c < book.size(); ++c) {
    if (book[c] > 0 && book[c] < smallest) smallest = book[c];
    if (c == 0 || book[c] != book[c - 1]) ++distinct;
  }
  fmt::print("kind: {}\n", aps::precision::DettmersCodec::typeName(type));
  fmt::print("block_size: {}\n", spec.blockSize > 0 ? std::to_string(spec.blockSize) : "0 (one absmax per message)");
  fmt::print("scale: fp32 absmax (4 bytes per block); a value travels as the nearest of 256 codes x absmax\n");
  fmt::print("code_values: {}\n", distinct);
  fmt::print("max: 1 (x absmax)\nmin_positive: {} (x absmax)\n", g9(smallest));
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

// Dettmers' code book: code, its value (x the block's absmax).
void table(const CodecSpec& spec) {
  APS_CHECK(spec.kind != Kind::BlockScaled,
            "table: {} scales each block of {} values by a shared power of two, so a code's value depends on its "
            "block; 'aps_formats table {}' lists the element codes",
            aps::precision::makeCodec(spec)->name(), spec.blockSize, spec.format.name);
  const auto book = aps::precision::DettmersCodec::codeBookOf(dettmersType(spec));
  for (size_t c = 0; c < book.size(); ++c) fmt::print("0x{:02x} {}\n", c, g9(book[c]));
}

void printValue(float y) {
  if (std::isnan(y)) {
    std::printf("nan\n");  // never "-nan": NaN has no sign a user can rely on
  } else {
    std::printf("%.9g\n", static_cast<double>(y));
  }
}

// One output line per input line: a blank input line gives a blank output line. A float
// format rounds line i (0-based, blank lines counted) stochastically with
// randomBits32(seed, 0, i), so the result of a number does not depend on the blank lines above
// it. A codec with blocks encodes the numbers (blank lines left out) as one message, in order:
// consecutive numbers share a block, as consecutive gradient values do.
void quantize(const CodecSpec& spec, RoundingMode mode, uint64_t seed) {
  const bool plain = spec.kind == Kind::Float;
  const Quantizer q(spec.format);
  std::vector<float> values;
  std::vector<bool> blank;
  std::string line;
  for (uint64_t index = 0; std::getline(std::cin, line); ++index) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) {
      if (plain) std::printf("\n");
      blank.push_back(true);
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
    if (plain) {
      printValue(q.quantize(x, mode, aps::randomBits32(seed, 0, index)));
    } else {
      values.push_back(x);
      blank.push_back(false);
    }
  }
  if (plain) return;
  const auto codec = aps::precision::makeCodec(spec);
  const auto n = static_cast<int64_t>(values.size());
  std::vector<uint8_t> wire(codec->encodedBytes(n));
  std::vector<float> out(values.size());
  codec->encode(values.data(), n, wire.data(), {seed, 0, 0});
  codec->decode(wire.data(), n, out.data());
  size_t next = 0;
  for (const bool b : blank) {
    if (b) {
      std::printf("\n");
    } else {
      printValue(out[next++]);
    }
  }
}

void errorStats(const CodecSpec& spec, const std::string& dist, int64_t count, uint64_t seed, RoundingMode mode) {
  APS_CHECK(dist == "normal" || dist == "uniform", "error: --dist '{}' is unknown (normal, uniform)", dist);
  APS_CHECK(count > 0, "error: --count {} must be > 0", count);
  const FloatFormat& f = spec.format;
  aps::Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(count)), q(x.size());
  for (auto& v : x) v = dist == "normal" ? rng.normal() : 2.0f * rng.uniform() - 1.0f;
  if (spec.kind == Kind::Float) {
    Quantizer(f).quantize(x.data(), q.data(), count, mode, {seed, 1, 0});
  } else {
    // Through the codec's bytes: what a rank receives of these values.
    const auto codec = aps::precision::makeCodec(spec);
    std::vector<uint8_t> wire(codec->encodedBytes(count));
    codec->encode(x.data(), count, wire.data(), {seed, 1, 0});
    codec->decode(wire.data(), count, q.data());
  }
  // A saturated value: at the format's largest finite magnitude (a codec with blocks: never
  // counted, its scales follow the data).
  const double top = spec.kind == Kind::Float ? f.maxValue() : std::numeric_limits<double>::infinity();
  double absSum = 0, sq = 0, relSum = 0, relMax = 0, bias = 0;
  int64_t relCount = 0, flushed = 0, saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(q[i]) - x[i];
    if (!std::isfinite(q[i]) || std::fabs(q[i]) >= top) ++saturated;
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
  fmt::print("format: {}\ndist: {}\nrounding: {}\ncount: {}\n",
             spec.kind == Kind::Float ? f.describe() : aps::precision::makeCodec(spec)->name(), dist,
             aps::precision::roundingModeName(spec.kind == Kind::Float ? mode : spec.rounding), count);
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

  const std::string formatHelp =
      "any precision.format: a preset (e4m3), an MX type (mxfp4), blocks (e3m0/block32), Dettmers' types "
      "(dettmers_dynamic), a rounding (e4m3:stochastic) or a YAML map";
  auto* infoCmd = app.add_subcommand(
      "info",
      "bias, max, min normal, min subnormal, epsilon, finite values, the most ranks APS serves; for a codec with "
      "blocks, its bits per value, block and scale");
  infoCmd->add_option("format", format, formatHelp)->required();
  auto* tableCmd =
      app.add_subcommand("table", "every code of a format of <= 8 bits (or of Dettmers' code book) and its value");
  tableCmd->add_option("format", format, formatHelp)->required();
  auto* quantizeCmd = app.add_subcommand(
      "quantize", "quantize one decimal number per stdin line (%.9g); a codec with blocks encodes them as one message");
  quantizeCmd->add_option("--format", format, formatHelp)->required();
  auto* roundingOption = quantizeCmd->add_option("--rounding", rounding, "nearest, stochastic or toward_zero");
  quantizeCmd->add_option(
      "--seed", seed,
      "stochastic rounding seed (input line i, from 0, blank lines counted, uses randomBits32(seed, 0, i))");
  auto* errorCmd = app.add_subcommand("error", "rounding error statistics on random data");
  errorCmd->add_option("format", format, formatHelp)->required();
  errorCmd->add_option("--dist", dist, "normal (N(0,1)) or uniform (U(-1,1))");
  errorCmd->add_option("--count", count, "number of samples");
  errorCmd->add_option("--seed", seed, "random seed");
  auto* errorRounding = errorCmd->add_option("--rounding", rounding, "nearest, stochastic or toward_zero");

  return aps::runTool(app, argc, argv, [&] {
    CodecSpec spec = parseSpec(format);
    // --rounding, where given, wins over a name's ':rounding'.
    if (roundingOption->count() > 0 || errorRounding->count() > 0) spec.rounding = aps::precision::parseRoundingMode(rounding);
    const bool plain = spec.kind == Kind::Float;
    if (*infoCmd) plain ? info(spec.format) : info(spec, format);
    if (*tableCmd) plain ? table(spec.format) : table(spec);
    if (*quantizeCmd) quantize(spec, spec.rounding, seed);
    if (*errorCmd) errorStats(spec, dist, count, seed, spec.rounding);
  });
}
