#pragma once

#include "precision/Codec.h"

#include <array>
#include <cstdint>
#include <vector>

namespace aps::precision {

// Dettmers' 8-bit approximations (ICLR 2016, arXiv 1511.04561): values are divided by the
// absolute maximum of their block, encoded as the index of the nearest of 256 code values
// in [-1, 1], and the fp32 absmax travels along. Wire layout per block of blockSize values
// (blockSize 0: the whole encoded chunk is one block, i.e. per tensor when a tensor is
// encoded at once): 4 bytes fp32 absmax, then one code byte per value. Every block, and so
// every encoded chunk, is self-contained.
class DettmersCodec : public Codec {
 public:
  enum class Type : uint8_t {
    DynamicTree,  // docs/ALGORITHMS.md, Dettmers' 8-bit types: the widely used 256-value dynamic tree code book
    Linear,       // uniform over [-1, 1]: code c is (c - 127) / 127 (c = 255 unused), 0 exact
    StaticTree,   // docs/ALGORITHMS.md, Dettmers' 8-bit types: a fixed 3-bit decimal exponent and a 4-bit
                  // bisection tree of (0.1, 1) (our reading of his static tree; staticTreeCodeBook)
  };

  DettmersCodec(Type type, int64_t blockSize);

  std::string name() const override;
  size_t encodedBytes(int64_t n) const override;
  void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const EncodeContext& ctx = {}) const override;
  // Cuts at whole blocks give the same blocks, absmax and codes byte for byte; one absmax
  // per encoded chunk (blockSize 0) cannot be cut.
  int64_t splitGranule() const override { return blockSize_ > 0 ? blockSize_ : 0; }

  // The sorted code book: code c decodes to codeBook()[c] * absmax.
  const std::array<float, 256>& codeBook() const { return codes_; }
  // Index of the code nearest to v (v in [-1, 1]), by binary search over the midpoints.
  uint8_t nearestCode(float v) const;
  int64_t blockSize() const { return blockSize_; }
  Type type() const { return type_; }
  // midpoints()[k] lies between codes k and k + 1 (k < 255); [255] = +inf.
  const std::array<float, 256>& midpoints() const { return midpoints_; }
  // The largest code encode produces (254 for Linear, whose code 255 is unused).
  uint32_t topCode() const { return type_ == Type::Linear ? 254u : 255u; }
  // Index of the code nearest to v by the shared binary search alone (no bucket shortcut).
  uint8_t nearestCodeBySearch(float v) const;

  static std::array<float, 256> dynamicTreeCodeBook();
  static std::array<float, 256> linearCodeBook();
  // Dettmers' static tree as we read it (the paper names the type and gives its error, not
  // its layout): after the sign, a fixed 3-bit exponent e gives the scale 10^-e (e = 0..7) and
  // a fixed 4 bits descend a bisection tree of (0.1, 1), the value being the midpoint of the
  // leaf's interval: 8 * 16 = 128 magnitudes per sign. As in the dynamic tree's code book, 0
  // and 1 get codes of their own; the smallest magnitude, 10^-7 * (0.1 + 0.9 / 32), gives its
  // place to 0. 127 * 2 + 2 = 256 sorted values in [-1, 1].
  static std::array<float, 256> staticTreeCodeBook();
  // The code book of a type.
  static std::array<float, 256> codeBookOf(Type type);
  // The codec name of a type without blocks ("dettmers_dynamic", "dettmers_linear", "dettmers_static").
  static const char* typeName(Type type);

 private:
  int64_t blockLength(int64_t n) const { return blockSize_ > 0 ? blockSize_ : (n > 0 ? n : 1); }
  // One block's absmax and codes (without AVX-512).
  void encodeBlock(const float* in, int64_t n, uint8_t* out) const;
  // out[i] = decoded value, or out[i] += it with `add` (without AVX-512; DettmersCodec.cpp's
  // vector forms take the code book and search tables loaded once per call).
  void decodeBlock(const uint8_t* in, int64_t n, float* out, bool add) const;
  // decode (add false) or decodeAdd (add true), block by block.
  void decodeBlocks(const uint8_t* in, int64_t n, float* out, bool add) const;

  Type type_;
  int64_t blockSize_;
  std::array<float, 256> codes_;
  std::array<float, 256> midpoints_;  // midpoints_[k] between codes k and k+1 (k < 255); [255] = +inf
  // Search shortcut: for each value of the top 16 bits of an fp32 v, the number of
  // midpoints below the bucket's smallest value; every bucket holds at most one midpoint
  // (checked), so the search ends with one comparison. Empty: binary search only.
  std::vector<uint8_t> bucketBase_;
  // The vector search's midpoints level by level, as integers: the seven levels over the 127
  // midpoints above code 127 (DettmersCodec.cpp's SearchTables folds the sign). Level L (step
  // 64 >> L) holds midpoints_[127 + j * 2 * step + step - 1] for its 2^L possible j, from
  // offset 2^L - 1, entry j at the position of j's L bits reversed; [127] is padding.
  alignas(64) std::array<uint32_t, 128> searchLevels_{};
  // The code book's fp32 bits as four byte planes (byte p of codes_[c] at [256 p + c]), for
  // the vector decode's byte permutes.
  alignas(64) std::array<uint8_t, 1024> codeBytes_{};
};

}  // namespace aps::precision
