#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace aps::precision {

// Which codes of the all-ones exponent are special (docs/ALGORITHMS.md, Float formats).
enum class Specials : uint8_t {
  Ieee,  // all-ones exponent reserved: mantissa 0 = inf, otherwise NaN (IEEE 754)
  Ocp,   // OCP FP8 E4M3 style: no inf, the single NaN S.1..1.1..1, every other code finite
  None,  // every code is finite (OCP MX FP4 E2M1); NaN inputs encode as the max magnitude
};

// What a value whose rounded magnitude exceeds the largest finite value becomes.
enum class Overflow : uint8_t {
  Saturate,  // the largest finite value with the input's sign
  Infinity,  // inf where the format has it (Ieee), otherwise NaN (Ocp)
};

// A binary floating-point format with one sign bit, `exponentBits` exponent bits and
// `mantissaBits` explicit mantissa bits, whose values are a subset of fp32's (so every
// quantized value is exactly representable as a float).
struct FloatFormat {
  std::string name = "fp32";
  int exponentBits = 8;
  int mantissaBits = 23;
  int bias = 127;
  bool subnormals = true;
  Specials specials = Specials::Ieee;
  Overflow overflow = Overflow::Infinity;

  // Presets: fp32, fp16, bf16, e5m2, e4m3 (OCP FP8), e4m3_ieee (APS artifact), e3m0, e3m2 and
  // e2m3 (OCP MX FP6), e2m1 (OCP MX FP4).
  static FloatFormat preset(const std::string& name);
  // The preset names preset() knows (float32, float16 and bfloat16 are accepted as aliases).
  static const std::vector<std::string>& presetNames();
  // A preset name, or a YAML map {preset?, exponent_bits, mantissa_bits, bias, subnormals,
  // specials: ieee|ocp|none, overflow: saturate|inf}; a preset's fields can be overridden.
  static FloatFormat fromYaml(const YAML::Node& node);
  // Same keys as fromYaml, values as strings (for command lines and tests).
  static FloatFormat fromMap(const std::map<std::string, std::string>& fields);

  // Throws aps::Error naming the offending key and value when the format is impossible.
  void validate() const;

  int bits() const { return 1 + exponentBits + mantissaBits; }
  int minExponent() const { return 1 - bias; }  // exponent of the smallest normal
  int maxExponent() const;                      // exponent of the largest finite value
  float maxValue() const;                       // largest finite value
  float minNormal() const;
  float minSubnormal() const;   // == minNormal() without subnormals
  float epsilon() const;        // 2^-mantissaBits: the gap above 1 (relative spacing)
  int64_t finiteCount() const;  // number of finite codes (+0 and -0 counted separately)
  bool hasInf() const { return specials == Specials::Ieee; }
  bool hasNan() const { return specials != Specials::None && !(specials == Specials::Ieee && mantissaBits == 0); }

  // Code layout: sign << (E + M) | exponent field << M | mantissa.
  uint32_t maxFiniteCode() const;  // magnitude bits of the largest finite value
  uint32_t infCode() const;        // magnitude bits of inf (Ieee only)
  // Magnitude bits of the canonical NaN: Ieee 0.1..1.10..0 (quiet); Ocp all ones; None
  // the max finite code (NaN inputs saturate); Ieee with 0 mantissa bits (e3m0) has no NaN
  // code, so NaN inputs become inf.
  uint32_t nanCode() const;
  uint32_t signBit() const { return 1u << (exponentBits + mantissaBits); }
  bool isFp32() const;

  // The value of one code (any code: finite, inf or NaN).
  float decode(uint32_t code) const;

  std::string describe() const;  // "e4m3 (E4M3, bias 7, subnormals, specials ocp, overflow inf)"

  bool operator==(const FloatFormat& other) const = default;
};

const char* specialsName(Specials s);
const char* overflowName(Overflow o);

}  // namespace aps::precision
