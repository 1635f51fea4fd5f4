#include "precision/FloatFormat.h"

#include "framework/core/Error.h"
#include "framework/core/Suggest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>

namespace aps::precision {

namespace {

FloatFormat make(const char* name, int e, int m, int bias, Specials specials, Overflow overflow) {
  FloatFormat f;
  f.name = name;
  f.exponentBits = e;
  f.mantissaBits = m;
  f.bias = bias;
  f.subnormals = true;
  f.specials = specials;
  f.overflow = overflow;
  return f;
}

int parseInt(const std::string& key, const std::string& value) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  APS_CHECK(used == value.size() && !value.empty(), "float format: {} = '{}' is not an integer", key, value);
  return v;
}

bool parseBool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "on" || value == "yes" || value == "1") return true;
  if (value == "false" || value == "off" || value == "no" || value == "0") return false;
  APS_FAIL("float format: {} = '{}' is not a boolean (true/false)", key, value);
}

Specials parseSpecials(const std::string& value) {
  if (value == "ieee") return Specials::Ieee;
  if (value == "ocp" || value == "fn" || value == "nan_only") return Specials::Ocp;
  if (value == "none" || value == "finite") return Specials::None;
  APS_FAIL("float format: specials = '{}' is unknown (ieee, ocp, none)", value);
}

Overflow parseOverflow(const std::string& value) {
  if (value == "saturate" || value == "sat") return Overflow::Saturate;
  if (value == "inf" || value == "nan" || value == "infinity") return Overflow::Infinity;
  APS_FAIL("float format: overflow = '{}' is unknown (saturate, inf)", value);
}

}  // namespace

const char* specialsName(Specials s) {
  switch (s) {
    case Specials::Ieee:
      return "ieee";
    case Specials::Ocp:
      return "ocp";
    case Specials::None:
      return "none";
  }
  return "?";
}

const char* overflowName(Overflow o) { return o == Overflow::Saturate ? "saturate" : "inf"; }

FloatFormat FloatFormat::preset(const std::string& name) {
  // docs/ALGORITHMS.md, Float formats. OCP FP8 (E4M3: no inf, NaN = S.1111.111, max 448; E5M2: IEEE-like,
  // max 57344), the APS artifact's IEEE-like E4M3 (max 240) and E3M0, OCP MX FP6 E3M2/E2M3 and FP4 E2M1 (max 6).
  // Non-saturating by default, so overflow stays visible; override with overflow: saturate.
  if (name == "fp32" || name == "float32") return make("fp32", 8, 23, 127, Specials::Ieee, Overflow::Infinity);
  if (name == "fp16" || name == "float16") return make("fp16", 5, 10, 15, Specials::Ieee, Overflow::Infinity);
  if (name == "bf16" || name == "bfloat16") return make("bf16", 8, 7, 127, Specials::Ieee, Overflow::Infinity);
  if (name == "e5m2") return make("e5m2", 5, 2, 15, Specials::Ieee, Overflow::Infinity);
  if (name == "e4m3") return make("e4m3", 4, 3, 7, Specials::Ocp, Overflow::Infinity);
  if (name == "e4m3_ieee") return make("e4m3_ieee", 4, 3, 7, Specials::Ieee, Overflow::Infinity);
  if (name == "e3m0") return make("e3m0", 3, 0, 3, Specials::Ieee, Overflow::Infinity);
  if (name == "e2m1") return make("e2m1", 2, 1, 1, Specials::None, Overflow::Saturate);
  // OCP MX FP6 element types: no inf or NaN, max 28 (E3M2) and 7.5 (E2M3).
  if (name == "e3m2") return make("e3m2", 3, 2, 3, Specials::None, Overflow::Saturate);
  if (name == "e2m3") return make("e2m3", 2, 3, 1, Specials::None, Overflow::Saturate);
  APS_FAIL("float format: preset = '{}' is unknown{} (the presets: {})", name, didYouMean(name, presetNames()),
           fmt::join(presetNames(), ", "));
}

const std::vector<std::string>& FloatFormat::presetNames() {
  static const std::vector<std::string> names{"fp32", "fp16", "bf16", "e5m2", "e4m3",
                                              "e4m3_ieee", "e3m0", "e3m2", "e2m3", "e2m1"};
  return names;
}

FloatFormat FloatFormat::fromMap(const std::map<std::string, std::string>& fields) {
  static const std::set<std::string> kKeys = {"name", "preset",     "exponent_bits", "mantissa_bits",
                                              "bias", "subnormals", "specials",      "overflow"};
  for (const auto& [key, value] : fields) {
    APS_CHECK(kKeys.count(key), "float format: unknown key '{}' (value '{}')", key, value);
  }
  FloatFormat f;
  const bool hasPreset = fields.count("preset") > 0;
  if (hasPreset) {
    f = preset(fields.at("preset"));
  } else {
    APS_CHECK(fields.count("exponent_bits") && fields.count("mantissa_bits"),
              "float format: a custom format needs exponent_bits and mantissa_bits (or a preset)");
    f.specials = Specials::Ieee;
    f.overflow = Overflow::Infinity;
    f.subnormals = true;
  }
  if (auto it = fields.find("exponent_bits"); it != fields.end()) f.exponentBits = parseInt(it->first, it->second);
  if (auto it = fields.find("mantissa_bits"); it != fields.end()) f.mantissaBits = parseInt(it->first, it->second);
  APS_CHECK(f.exponentBits >= 1 && f.exponentBits <= 8, "float format: exponent_bits = {} must be in 1..8",
            f.exponentBits);
  APS_CHECK(f.mantissaBits >= 0 && f.mantissaBits <= 23, "float format: mantissa_bits = {} must be in 0..23",
            f.mantissaBits);
  if (auto it = fields.find("bias"); it != fields.end()) {
    f.bias = parseInt(it->first, it->second);
  } else if (!hasPreset || fields.count("exponent_bits")) {
    f.bias = (1 << (f.exponentBits - 1)) - 1;  // IEEE 754 default bias
  }
  if (auto it = fields.find("subnormals"); it != fields.end()) f.subnormals = parseBool(it->first, it->second);
  if (auto it = fields.find("specials"); it != fields.end()) f.specials = parseSpecials(it->second);
  if (auto it = fields.find("overflow"); it != fields.end()) f.overflow = parseOverflow(it->second);
  if (auto it = fields.find("name"); it != fields.end()) {
    f.name = it->second;
  } else {
    // The preset's name (or eXmY) plus a suffix for every field that differs from it
    // (or from the IEEE-like defaults), so logs tell variants apart.
    FloatFormat ref;
    if (hasPreset && f.exponentBits == preset(fields.at("preset")).exponentBits &&
        f.mantissaBits == preset(fields.at("preset")).mantissaBits) {
      ref = preset(fields.at("preset"));
    } else {
      ref.name = fmt::format("e{}m{}", f.exponentBits, f.mantissaBits);
      ref.exponentBits = f.exponentBits;
      ref.mantissaBits = f.mantissaBits;
      ref.bias = (1 << (f.exponentBits - 1)) - 1;
    }
    f.name = ref.name;
    if (f.bias != ref.bias) f.name += fmt::format("_b{}", f.bias);
    if (f.subnormals != ref.subnormals) f.name += f.subnormals ? "_sub" : "_nosub";
    if (f.specials != ref.specials) f.name += std::string("_") + specialsName(f.specials);
    if (f.overflow != ref.overflow) f.name += f.overflow == Overflow::Saturate ? "_sat" : "_inf";
  }
  f.validate();
  return f;
}

FloatFormat FloatFormat::fromYaml(const YAML::Node& node) {
  if (node.IsScalar()) return preset(node.as<std::string>());
  APS_CHECK(node.IsMap(), "float format: expected a preset name or a map, got a {}",
            node.IsSequence() ? "sequence" : "null");
  std::map<std::string, std::string> fields;
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    APS_CHECK(kv.second.IsScalar(), "float format: {} must be a scalar", key);
    fields[key] = kv.second.as<std::string>();
  }
  return fromMap(fields);
}

void FloatFormat::validate() const {
  APS_CHECK(exponentBits >= 1 && exponentBits <= 8, "float format {}: exponent_bits = {} must be in 1..8", name,
            exponentBits);
  APS_CHECK(mantissaBits >= 0 && mantissaBits <= 23, "float format {}: mantissa_bits = {} must be in 0..23", name,
            mantissaBits);
  const uint32_t minNormalCode = 1u << mantissaBits;
  APS_CHECK(maxFiniteCode() >= minNormalCode,
            "float format {}: exponent_bits = {} with specials = {} leaves no normal values", name, exponentBits,
            specialsName(specials));
  // Every value must be an fp32 value, so quantized results are exact floats.
  APS_CHECK(minExponent() >= -126, "float format {}: bias = {} puts the smallest normal 2^{} below fp32's range", name,
            bias, minExponent());
  APS_CHECK(maxExponent() >= minExponent(), "float format {}: bias = {} leaves no normal values", name, bias);
  APS_CHECK(maxExponent() <= 127, "float format {}: bias = {} puts the largest value 2^{} above fp32's range", name,
            bias, maxExponent());
  APS_CHECK(!(overflow == Overflow::Infinity && specials == Specials::None),
            "float format {}: overflow = inf needs a format with inf or NaN (specials = none)", name);
}

int FloatFormat::maxExponent() const {
  const uint32_t field = maxFiniteCode() >> mantissaBits;
  return static_cast<int>(field) - bias;
}

uint32_t FloatFormat::maxFiniteCode() const {
  const uint32_t allOnes = (1u << (exponentBits + mantissaBits)) - 1;
  switch (specials) {
    case Specials::Ieee:
      return allOnes - (1u << mantissaBits);  // exponent all-ones minus one, mantissa all ones
    case Specials::Ocp:
      return allOnes - 1;  // S.1..1.1..1 is NaN
    case Specials::None:
      return allOnes;
  }
  return allOnes;
}

uint32_t FloatFormat::infCode() const { return ((1u << exponentBits) - 1) << mantissaBits; }

uint32_t FloatFormat::nanCode() const {
  switch (specials) {
    case Specials::Ieee:
      return mantissaBits > 0 ? infCode() | (1u << (mantissaBits - 1)) : infCode();
    case Specials::Ocp:
      return (1u << (exponentBits + mantissaBits)) - 1;
    case Specials::None:
      return maxFiniteCode();
  }
  return 0;
}

bool FloatFormat::isFp32() const {
  return exponentBits == 8 && mantissaBits == 23 && bias == 127 && subnormals && specials == Specials::Ieee;
}

float FloatFormat::decode(uint32_t code) const {
  const uint32_t mag = code & (signBit() - 1);
  const bool negative = (code & signBit()) != 0;
  const uint32_t field = mag >> mantissaBits;
  const uint32_t mant = mag & ((1u << mantissaBits) - 1);
  double v = 0.0;
  if (specials == Specials::Ieee && field == (1u << exponentBits) - 1) {
    v = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (specials == Specials::Ocp && mag == nanCode()) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (field == 0) {
    // Subnormal codes; without subnormals they read as zero (denormals-are-zero).
    v = subnormals ? std::ldexp(static_cast<double>(mant), minExponent() - mantissaBits) : 0.0;
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << mantissaBits)), static_cast<int>(field) - bias - mantissaBits);
  }
  const float f = static_cast<float>(v);
  return negative ? -f : f;
}

float FloatFormat::maxValue() const { return decode(maxFiniteCode()); }
float FloatFormat::minNormal() const { return decode(1u << mantissaBits); }
float FloatFormat::minSubnormal() const { return subnormals && mantissaBits > 0 ? decode(1u) : minNormal(); }
float FloatFormat::epsilon() const { return std::ldexp(1.0f, -mantissaBits); }

int64_t FloatFormat::finiteCount() const {
  // Finite magnitude codes are 0..maxFiniteCode; without subnormals the nonzero codes with
  // a zero exponent field are never produced. Both signs count.
  int64_t magnitudes = int64_t{maxFiniteCode()} + 1;
  if (!subnormals) magnitudes -= (int64_t{1} << mantissaBits) - 1;
  return 2 * magnitudes;
}

std::string FloatFormat::describe() const {
  return fmt::format("{}: E{}M{}, bias {}, subnormals {}, specials {}, overflow {}", name, exponentBits, mantissaBits,
                     bias, subnormals ? "on" : "off", specialsName(specials), overflowName(overflow));
}

}  // namespace aps::precision
