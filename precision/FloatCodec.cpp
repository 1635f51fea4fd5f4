#include "precision/FloatCodec.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace aps::precision {

namespace {

constexpr int64_t kChunk = 1024;  // values per fused step; even, so nibble chunks start on a byte

bool sameLayout(const FloatFormat& a, const FloatFormat& b) {
  return a.exponentBits == b.exponentBits && a.mantissaBits == b.mantissaBits && a.bias == b.bias &&
         a.subnormals == b.subnormals && a.specials == b.specials;
}

}  // namespace

FloatCodec::FloatCodec(const FloatFormat& format, RoundingMode rounding)
    : quantizer_(format), rounding_(rounding), decoder_(Decoder::Table) {
#if defined(__F16C__)
  decodeParams_ = codeDecodeParams(format, true);
#else
  decodeParams_ = codeDecodeParams(format, false);
#endif
  const int bits = format.bits();
  width_ = bits <= 4 ? 0 : bits <= 8 ? 1 : bits <= 16 ? 2 : 4;
  if (width_ == 4) {
    decoder_ = Decoder::Fp32;  // the wire carries the rounded value's fp32 bits
    return;
  }
  if (sameLayout(format, FloatFormat::preset("bf16"))) decoder_ = Decoder::Bf16;
#if defined(__F16C__)
  if (sameLayout(format, FloatFormat::preset("fp16"))) decoder_ = Decoder::Fp16;
#endif
  if (decoder_ != Decoder::Table) return;  // bf16 and fp16 decode without a table
  const uint32_t codes = width_ == 2 ? 65536u : 256u;
  const uint32_t mask = (1u << bits) - 1;
  table_.resize(codes);
  for (uint32_t c = 0; c < codes; ++c) table_[c] = kernels::decodeCode(c & mask, decodeParams_);
  if (width_ == 0) {
    pairs_.resize(512);
    for (uint32_t byte = 0; byte < 256; ++byte) {
      pairs_[2 * byte] = table_[byte & 15u];
      pairs_[2 * byte + 1] = table_[byte >> 4];
    }
  }
}

std::string FloatCodec::name() const {
  std::string n = format().name;
  if (rounding_ != RoundingMode::NearestEven) n += std::string(":") + roundingModeName(rounding_);
  return n;
}

size_t FloatCodec::encodedBytes(int64_t n) const {
  APS_ASSERT(n >= 0);
  return width_ == 0 ? static_cast<size_t>((n + 1) / 2) : static_cast<size_t>(n) * width_;
}

size_t FloatCodec::byteOffset(int64_t i) const { return width_ == 0 ? static_cast<size_t>(i / 2) : i * width_; }

void FloatCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  if (width_ == 1) {
    quantizer_.encode(in, out, n, rounding_, ctx);
    return;
  }
  // Other widths: codes of a chunk in a local buffer, then packed.
  alignas(64) uint16_t codes16[kChunk];
  alignas(64) uint8_t codes8[kChunk];
  alignas(64) float values[kChunk];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    EncodeContext local = ctx;
    local.offset = ctx.offset + begin;
    uint8_t* dst = out + byteOffset(begin);
    if (width_ == 0) {
      quantizer_.encode(in + begin, codes8, m, rounding_, local);
      const int64_t pairs = m / 2;
      for (int64_t i = 0; i < pairs; ++i) {
        dst[i] = static_cast<uint8_t>(codes8[2 * i] | (codes8[2 * i + 1] << 4));
      }
      if (m % 2) dst[pairs] = codes8[m - 1];
    } else if (width_ == 2) {
      quantizer_.encode(in + begin, codes16, m, rounding_, local);
      std::memcpy(dst, codes16, static_cast<size_t>(m) * 2);  // x86: little endian
    } else {
      quantizer_.quantize(in + begin, values, m, rounding_, local);
      std::memcpy(dst, values, static_cast<size_t>(m) * 4);
    }
  }
}

void FloatCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  switch (width_) {
    case 0: {
      const int64_t pairs = n / 2;
      for (int64_t i = 0; i < pairs; ++i) std::memcpy(out + 2 * i, &pairs_[2 * in[i]], 2 * sizeof(float));
      if (n % 2) out[n - 1] = table_[in[pairs] & 15u];
      return;
    }
    case 1: {
      const float* table = table_.data();
      for (int64_t i = 0; i < n; ++i) out[i] = table[in[i]];
      return;
    }
    case 2: {
      if (decoder_ == Decoder::Bf16) {
        for (int64_t i = 0; i < n; ++i) {
          uint16_t c;
          std::memcpy(&c, in + 2 * i, 2);
          const uint32_t bits = uint32_t{c} << 16;
          std::memcpy(out + i, &bits, 4);
        }
        return;
      }
#if defined(__F16C__)
      if (decoder_ == Decoder::Fp16) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
          _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
        }
        for (; i < n; ++i) {
          uint16_t c;
          std::memcpy(&c, in + 2 * i, 2);
          out[i] = _cvtsh_ss(c);
        }
        return;
      }
#endif
      const float* table = table_.data();
      for (int64_t i = 0; i < n; ++i) {
        uint16_t c;
        std::memcpy(&c, in + 2 * i, 2);
        out[i] = table[c];
      }
      return;
    }
    default:
      std::memcpy(out, in, static_cast<size_t>(n) * 4);
      return;
  }
}

void FloatCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  alignas(64) float values[kChunk];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    decode(in + byteOffset(begin), m, values);
    float* dst = acc + begin;
    for (int64_t i = 0; i < m; ++i) dst[i] += values[i];
  }
}

void FloatCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                 const EncodeContext& ctx) const {
  // Chunk by chunk: both inputs of a chunk are read before its output is written, so out
  // may alias a or b.
  alignas(64) float va[kChunk];
  alignas(64) float vb[kChunk];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    const size_t off = byteOffset(begin);
    decode(a + off, m, va);
    decode(b + off, m, vb);
    for (int64_t i = 0; i < m; ++i) va[i] += vb[i];
    EncodeContext local = ctx;
    local.offset = ctx.offset + begin;
    encode(va, m, out + off, local);
  }
}

}  // namespace aps::precision
