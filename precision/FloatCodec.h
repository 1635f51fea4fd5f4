#pragma once

#include "precision/Codec.h"
#include "precision/FloatFormat.h"
#include "precision/Quantizer.h"
#include "framework/numerics/RoundingMode.h"

#include <vector>

namespace aps::precision {

// A Codec for a FloatFormat: the value's code on the wire, packed by width (docs/ALGORITHMS.md, Float formats):
// formats of <= 4 bits two per byte (element 2i in the low nibble), 5..8 bits one byte,
// 9..16 bits two bytes (little endian), wider formats the fp32 bits of the rounded value.
// Decoding goes through a table of every code (256 entries for <= 8 bits).
class FloatCodec : public Codec {
 public:
  FloatCodec(const FloatFormat& format, RoundingMode rounding);

  std::string name() const override;
  size_t encodedBytes(int64_t n) const override;
  void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const EncodeContext& ctx = {}) const override;
  // Nearest rounding of codes of <= 8 bits, on AVX-512: each value rounded to the format's
  // value in registers (ValueRounding) and stored or added, no code formed, over the values
  // decode's vector loop takes (its 16 or 64 values a step, the same add instruction); the rest,
  // and every other codec, as Codec's encode then decode.
  void roundTripInto(const float* in, int64_t n, float* acc, bool add, uint8_t* scratch,
                     const EncodeContext& ctx = {}) const override;
  // Element-wise, random bits indexed by position, and a decoded NaN kept whatever it is added
  // to (on every path, vector or scalar), so any cut (at even positions for nibbles, whose
  // bytes hold two) keeps every value's bits. Cuts at multiples of 64 also keep the vector
  // paths' steps (64 nibble codes, 16 values otherwise) whole.
  int64_t splitGranule() const override { return kSplitGranule; }
  bool encodesFp32Bits() const override { return identityNanBits_ != 0; }
  bool roundsSticky16Exactly() const override;
  // Codes of one byte or more (not nibbles, whose cuts must fall between bytes).
  bool roundTripsAlikeAtAnyCut() const override { return width_ != 0; }
  // Byte codes rounded in registers (roundTripsInRegisters, AVX-512), 2^shift a normal float.
  bool roundTripKeysInto(const uint16_t* keys, int64_t n, int shift, float* acc, bool add) const override;
  static constexpr int64_t kSplitGranule = 64;

  const FloatFormat& format() const { return quantizer_.format(); }
  RoundingMode rounding() const { return rounding_; }
  int bytesPerValue() const { return width_; }  // 0 for two values per byte
  // The rounding core's parameters (kernels::roundOne; the CUDA codec rounds with them).
  const kernels::RoundingParams& roundingParams() const { return quantizer_.params(); }
  // How this codec's codes decode (kernels::decodeCode; the CUDA codec decodes with it).
  const kernels::CodeDecodeParams& decodeParams() const { return decodeParams_; }
  // Whether the fused decodeAddEncode decodes byte codes through fp16 (F16C) rather than table
  // permutes: E + M = 7 formats whose codes embed in fp16 up to one shared special value,
  // checked code by code when the codec is built (AVX-512 builds only).
  bool decodesBytesThroughFp16() const { return half_.usable; }
  // Whether roundTripInto rounds in registers (ValueRounding) rather than through codes.
  bool roundTripsInRegisters() const { return values_.usable; }

 private:
  // Byte offset of element i (i even for packed nibbles).
  size_t byteOffset(int64_t i) const;

  // decode (out = value) or decodeAdd (out += value) of n values; decodeWide for 2-byte codes.
  template <bool kAdd>
  void decodeInto(const uint8_t* in, int64_t n, float* out) const;
  template <bool kAdd>
  void decodeWide(const uint8_t* in, int64_t n, float* out) const;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // AVX-512 decoders of nibble and byte codes: the count they decoded, the rest is the caller's.
  template <bool kAdd>
  int64_t decodeNibbles16(const uint8_t* in, int64_t n, float* out) const;
  template <bool kAdd>
  int64_t decodeBytes16(const uint8_t* in, int64_t n, float* out) const;
  int64_t decodeSumBytes16(const uint8_t* a, const uint8_t* b, int64_t n, float* out) const;
  template <typename Decoder, bool kAdd>
  int64_t decodeBytesWith(const uint8_t* in, int64_t n, float* out) const;
  template <typename Decoder>
  int64_t decodeSumBytesWith(const uint8_t* a, const uint8_t* b, int64_t n, float* out) const;
  void probeHalfLayout();
  class ByteDecoder16;
  class HalfDecoder16;
#endif

  void encodeFp32Identity(const float* in, int64_t n, uint8_t* out) const;
  // Nearest rounding to the format's values on the fp32 bits (roundTripInto): at and above
  // the smallest normal 2^emin, the bits rounded at bit 23 - M (ties to an even last bit; for
  // M = 0 the last bit of the format's exponent field, which is fp32's flipped when the bias is
  // even); below it, |x| + 2^(q + 23) - 2^(q + 23) rounds to the quantum 2^q (2^(emin - M), or
  // 2^emin without subnormals) with IEEE's ties to even, exact for q >= -125 whatever the
  // FTZ/DAZ modes (an fp32 subnormal input is below half a quantum either way). Overflow and
  // NaN take the decoded value of the overflow and NaN codes; the sign is the input's. Set up
  // when built and checked there against encode then decode (every code's value, the midpoints
  // between them, both infinities); any difference leaves roundTripInto on the codes.
  struct ValueRounding {
    bool usable = false;
    uint32_t shift = 0, halfMinusOne = 0, lsbFlip = 0;  // the rounding at bit `shift`
    uint32_t minNormalBits = 0, maxValueBits = 0, overflowBits = 0, nanBits = 0;
    float below = 0.0f;  // 2^(q + 23)
  } values_;
  void setUpValueRounding();
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // ValueRounding of in[0, n), stored or added, 16 values a step, the last ones as one masked
  // step; returns n.
  int64_t roundTripValues(const float* in, int64_t n, float* acc, bool add) const;
  // The same over what `source` loads: source.full(i) the 16 values at i, source.part(i, k)
  // the k < 16 values at i in the low lanes.
  template <typename Source>
  void roundTripFrom(const Source& source, int64_t n, float* acc, bool add) const;
#endif

  Quantizer quantizer_;
  RoundingMode rounding_;
  int width_;  // 0 (nibbles), 1, 2 or 4 bytes per value
  enum class Decoder : uint8_t { Table, Bf16, Fp16, Fp32 } decoder_;
  kernels::CodeDecodeParams decodeParams_;
  std::vector<float> table_;  // value of every code (<= 16 bits), kernels::decodeCode's
  // Byte codes: table_[c | 128] has table_[c]'s bits xor bit7Flip_ for every c (checked, not assumed).
  bool bit7Symmetric_ = false;
  uint32_t bit7Flip_ = 0;
  // Byte codes that decode through fp16 (FloatCodec::HalfDecoder16; probeHalfLayout).
  struct HalfLayout {
    bool usable = false;
    int shift = 0;                            // the magnitude's left shift onto fp16's fields
    float scale = 1.0f;                       // 2^(15 - bias)
    uint32_t patchFrom = 128, patchBits = 0;  // magnitudes >= patchFrom decode to patchBits
  } half_;
  // fp32 with IEEE overflow: the bits of its NaN (encode is then encodeFp32Identity); else 0.
  uint32_t identityNanBits_ = 0;
};

}  // namespace aps::precision
