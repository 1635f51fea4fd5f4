#include "precision/CodecSpec.h"

#include "framework/core/Error.h"
#include "framework/core/Suggest.h"
#include "precision/BlockScaledCodec.h"
#include "precision/DettmersCodec.h"
#include "precision/FloatCodec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace aps::precision {

namespace {

// OCP MX v1.0 types: element format, 32 values per E8M0 scale.
constexpr std::pair<const char*, const char*> kMxTypes[] = {
    {"mxfp8_e4m3", "e4m3"}, {"mxfp8_e5m2", "e5m2"}, {"mxfp6_e3m2", "e3m2"}, {"mxfp6_e2m3", "e2m3"}, {"mxfp4", "e2m1"}};
constexpr int64_t kMxBlock = 32;

int64_t parseBlock(const std::string& text, const std::string& whole, bool zeroAllowed = false) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  APS_CHECK(used == text.size() && !text.empty() && (v > 0 || (zeroAllowed && v == 0)),
            "codec '{}': block size '{}' is not a {} integer", whole, text, zeroAllowed ? "non-negative" : "positive");
  return v;
}

bool parseDettmersKind(const std::string& name, CodecSpec::Kind& kind) {
  if (name == "dettmers_dynamic" || name == "dynamic_tree") {
    kind = CodecSpec::Kind::DettmersDynamic;
    return true;
  }
  if (name == "dettmers_linear" || name == "linear8") {
    kind = CodecSpec::Kind::DettmersLinear;
    return true;
  }
  if (name == "dettmers_static" || name == "static_tree") {
    kind = CodecSpec::Kind::DettmersStatic;
    return true;
  }
  return false;
}

}  // namespace

CodecSpec CodecSpec::parse(const std::string& text) {
  CodecSpec spec;
  std::string head = text;
  std::string tail;
  if (const auto slash = text.find('/'); slash != std::string::npos) {
    head = text.substr(0, slash);
    tail = text.substr(slash + 1);
  }
  if (parseDettmersKind(head, spec.kind)) {
    if (!tail.empty()) {
      APS_CHECK(tail.rfind("block", 0) == 0, "codec '{}': expected '/block<N>' after the type, got '/{}'", text, tail);
      spec.blockSize = parseBlock(tail.substr(5), text);
    }
    return spec;
  }
  std::string formatName = head;
  if (const auto colon = head.find(':'); colon != std::string::npos) {
    formatName = head.substr(0, colon);
    spec.rounding = parseRoundingMode(head.substr(colon + 1));
  }
  for (const auto& [mx, element] : kMxTypes) {
    if (formatName != mx) continue;
    APS_CHECK(tail.empty(), "codec '{}': {} has blocks of {} by definition; '/{}' does not apply", text, mx, kMxBlock,
              tail);
    spec.kind = Kind::BlockScaled;
    spec.format = FloatFormat::preset(element);
    spec.blockSize = kMxBlock;
    return spec;
  }
  const auto& presets = FloatFormat::presetNames();
  const bool alias = formatName == "float32" || formatName == "float16" || formatName == "bfloat16";
  if (!alias && std::find(presets.begin(), presets.end(), formatName) == presets.end()) {
    APS_FAIL("format '{}' is unknown{} (the names: {}; a float format of any split is a map {{exponent_bits, "
             "mantissa_bits, ...}}; blocks: 'e4m3/block32' or precision.scaling: block)",
             formatName, didYouMean(formatName, names()), fmt::join(names(), ", "));
  }
  spec.format = FloatFormat::preset(formatName);
  if (!tail.empty()) {
    APS_CHECK(tail.rfind("block", 0) == 0, "codec '{}': expected '/block<N>' after the format, got '/{}'", text, tail);
    spec.kind = Kind::BlockScaled;
    spec.blockSize = parseBlock(tail.substr(5), text, true);
  }
  return spec;
}

std::vector<std::string> CodecSpec::names() {
  std::vector<std::string> out = FloatFormat::presetNames();
  for (const auto& [mx, element] : kMxTypes) out.emplace_back(mx);
  out.insert(out.end(), {"dettmers_dynamic", "dettmers_linear", "dettmers_static"});
  return out;
}

CodecSpec CodecSpec::fromYaml(const YAML::Node& node) {
  if (node.IsScalar()) return parse(node.as<std::string>());
  APS_CHECK(node.IsMap(), "codec: expected a name or a map");
  CodecSpec spec;
  // A bare format map ({exponent_bits: 3, mantissa_bits: 4, ...}) is a float codec of it.
  if (!node["type"] && !node["format"] && !node["block_size"] && !node["rounding"]) {
    spec.format = FloatFormat::fromYaml(node);
    return spec;
  }
  if (node["type"]) {
    const auto type = node["type"].as<std::string>();
    if (!parseDettmersKind(type, spec.kind)) {
      APS_CHECK(type == "float",
                "codec: type = '{}' is unknown (float, dettmers_dynamic, dettmers_linear, dettmers_static)", type);
    }
  }
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (key == "type") continue;
    if (key == "block_size") {
      APS_CHECK(spec.kind != Kind::Float, "codec: block_size only applies to dettmers types (a float format with "
                                          "blocks is written 'e4m3/block32' or precision.scaling: block)");
      spec.blockSize = parseBlock(kv.second.as<std::string>(), "block_size");
    } else if (key == "format") {
      APS_CHECK(spec.kind == Kind::Float, "codec: format only applies to type float");
      spec.format = FloatFormat::fromYaml(kv.second);
    } else if (key == "rounding") {
      spec.rounding = parseRoundingMode(kv.second.as<std::string>());
    } else {
      APS_FAIL("codec: unknown key '{}'", key);
    }
  }
  return spec;
}

CodecSpec CodecSpec::withBlocks(int64_t size) const {
  if (kind != Kind::Float || format.isFp32()) return *this;  // fp32 has nothing to scale
  APS_CHECK(size >= 0, "block scaling: block_size = {} must be >= 0 (0: one scale per chunk)", size);
  CodecSpec out = *this;
  out.kind = Kind::BlockScaled;
  out.blockSize = size;
  return out;
}

std::unique_ptr<Codec> makeCodec(const CodecSpec& spec) {
  switch (spec.kind) {
    case CodecSpec::Kind::Float:
      return std::make_unique<FloatCodec>(spec.format, spec.rounding);
    case CodecSpec::Kind::BlockScaled:
      return std::make_unique<BlockScaledCodec>(spec.format, spec.rounding, spec.blockSize);
    case CodecSpec::Kind::DettmersDynamic:
      return std::make_unique<DettmersCodec>(DettmersCodec::Type::DynamicTree, spec.blockSize);
    case CodecSpec::Kind::DettmersLinear:
      return std::make_unique<DettmersCodec>(DettmersCodec::Type::Linear, spec.blockSize);
    case CodecSpec::Kind::DettmersStatic:
      return std::make_unique<DettmersCodec>(DettmersCodec::Type::StaticTree, spec.blockSize);
  }
  APS_FAIL("codec: unknown kind");
}

}  // namespace aps::precision
