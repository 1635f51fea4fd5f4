#pragma once

#include "precision/Codec.h"
#include "precision/FloatCodec.h"
#include "precision/FloatFormat.h"
#include "framework/numerics/RoundingMode.h"

#include <cstdint>
#include <string>

namespace aps::precision {

// Block scaling (docs/ALGORITHMS.md, Block scaling and OCP MX): every block of `blockSize`
// consecutive values gets its own power-of-two scale X = 2^(floor(log2(amax)) - emax), amax the
// block's largest magnitude and emax the exponent of the element format's largest finite value,
// so the block's largest value lands in the format's top binade and the block uses the format's
// whole range. The scale travels as one E8M0 byte (2^(code - 127), code 255 = NaN, the exponent
// clamped to [-127, 127]); the elements are V / X rounded to the element format, saturating at
// its largest finite value. A block holding inf or NaN gets the NaN scale and decodes to NaN.
// With E4M3, E5M2, E3M2, E2M3 or E2M1 elements and blocks of 32 this is OCP MX v1.0 (MXFP8,
// MXFP6, MXFP4). blockSize 0: one scale for the whole encoded chunk.
//
// Wire layout of n values: ceil(n / blockSize) scale bytes, then the elements as FloatCodec
// packs them. A chunk is self-contained, so an all-reduce that re-encodes a sum picks fresh
// scales for it (two_shot's owner, every ring hop): no exponent agreement between ranks.
class BlockScaledCodec : public Codec {
 public:
  BlockScaledCodec(const FloatFormat& element, RoundingMode rounding, int64_t blockSize);

  std::string name() const override;
  size_t encodedBytes(int64_t n) const override;
  void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const EncodeContext& ctx = {}) const override;
  // Cuts at whole blocks (and whole element bytes) keep every block's values and scale: the
  // pieces carry the same scales and elements, only laid out per piece, and every block is
  // scaled, rounded and (decodeAdd) added by the same per-block code as in the whole call
  // (the elements it rounds are finite: a NaN block travels as its scale). One scale per
  // encoded chunk (blockSize 0) cannot be cut.
  int64_t splitGranule() const override;

  const FloatFormat& element() const { return elements_.format(); }
  const FloatCodec& elements() const { return elements_; }  // the saturating element codec
  int64_t blockSize() const { return blockSize_; }
  // The E8M0 code of a block whose largest magnitude is amax (255 for inf or NaN).
  uint8_t scaleCode(float amax) const;
  static constexpr int kScaleBias = 127;     // kernels::kScaleBias
  static constexpr uint8_t kNanScale = 255;  // kernels::kNanScale

 private:
  int64_t blockLength(int64_t n) const { return blockSize_ > 0 ? blockSize_ : (n > 0 ? n : 1); }
  int64_t blocks(int64_t n) const { return n == 0 ? 0 : (n + blockLength(n) - 1) / blockLength(n); }

  void encodeRange(const float* x, int64_t n, int64_t begin, int64_t m, uint8_t* out, float* scaled,
                   const EncodeContext& ctx) const;
  void encodeScaledRange(const float* x, int64_t n, int64_t begin, int64_t m, const uint8_t* codes, int64_t firstBlock,
                         uint8_t* out, float* scaled, const EncodeContext& ctx) const;
  void decodeRange(const uint8_t* in, int64_t n, int64_t begin, int64_t m, float* out, float* acc = nullptr) const;

  FloatCodec elements_;  // the element format, saturating
  int64_t blockSize_;
  int emax_;
};

}  // namespace aps::precision
