#pragma once

#include "precision/Codec.h"
#include "precision/FloatFormat.h"
#include "framework/numerics/RoundingMode.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace aps::precision {

// What a wire codec is: a float format with a rounding mode, the same with a power-of-two
// scale per block (BlockScaledCodec; OCP MX), or one of Dettmers' 8-bit absmax-normalised
// types (arXiv 1511.04561).
struct CodecSpec {
  enum class Kind : uint8_t { Float, BlockScaled, DettmersDynamic, DettmersLinear, DettmersStatic };

  Kind kind = Kind::Float;
  FloatFormat format = FloatFormat::preset("fp32");   // Float; BlockScaled: the element format
  RoundingMode rounding = RoundingMode::NearestEven;  // Float, BlockScaled
  int64_t blockSize = 0;  // BlockScaled: values per scale; Dettmers: per absmax (0: one per encoded chunk)

  // "e4m3", "e4m3:stochastic", "fp16:toward_zero", "e3m0/block32", "e2m1:stochastic/block16",
  // the OCP MX types "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4" (block 32,
  // optionally ":stochastic"), "dettmers_dynamic", "dettmers_linear/block256", "dettmers_static".
  static CodecSpec parse(const std::string& text);
  // Every name parse() takes before its ':rounding' and '/block<N>' parts: the float presets,
  // the OCP MX types and Dettmers' types.
  static std::vector<std::string> names();
  // A string as in parse(), or a map {format: <preset or format map>, rounding: ...} or
  // {type: dettmers_dynamic|dettmers_linear|dettmers_static, block_size: 256}.
  static CodecSpec fromYaml(const YAML::Node& node);
  // The block-scaled codec of a float spec (precision.scaling: block); other kinds unchanged.
  CodecSpec withBlocks(int64_t size) const;
};

std::unique_ptr<Codec> makeCodec(const CodecSpec& spec);
inline std::unique_ptr<Codec> makeCodec(const std::string& text) { return makeCodec(CodecSpec::parse(text)); }

}  // namespace aps::precision
