#pragma once

#include "precision/Codec.h"
#include "precision/FloatFormat.h"
#include "precision/RoundingMode.h"

#include <cstdint>
#include <memory>
#include <string>

namespace YAML {
class Node;
}

namespace aps::precision {

// What a wire codec is: a float format with a rounding mode, or one of Dettmers' 8-bit
// absmax-normalised types (arXiv 1511.04561).
struct CodecSpec {
  enum class Kind : uint8_t { Float, DettmersDynamic, DettmersLinear };

  Kind kind = Kind::Float;
  FloatFormat format = FloatFormat::preset("fp32");   // Kind::Float
  RoundingMode rounding = RoundingMode::NearestEven;  // Kind::Float
  int64_t blockSize = 0;                              // Dettmers: values per absmax (0: one absmax per encoded chunk)

  // "e4m3", "e4m3:stochastic", "fp16:toward_zero", "dettmers_dynamic", "dettmers_linear/block256".
  static CodecSpec parse(const std::string& text);
  // A string as in parse(), or a map {format: <preset or format map>, rounding: ...} or
  // {type: dettmers_dynamic|dettmers_linear, block_size: 256}.
  static CodecSpec fromYaml(const YAML::Node& node);
};

std::unique_ptr<Codec> makeCodec(const CodecSpec& spec);
inline std::unique_ptr<Codec> makeCodec(const std::string& text) { return makeCodec(CodecSpec::parse(text)); }

}  // namespace aps::precision
