#include "precision/BlockScaledCodec.h"

#include "framework/core/Error.h"
#include "precision/ApsScaler.h"
#include "precision/kernels/Scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace aps::precision {

namespace {

FloatFormat saturating(FloatFormat f) {
  f.overflow = Overflow::Saturate;
  return f;
}

// Values per encode or decode step: whole blocks whose scaled values stay in L1 between the
// scaling and the element codec.
constexpr int64_t kStep = 2048;
// The longest window of whole blocks whose sums the fused step keeps (256 KiB, in L2).
constexpr int64_t kMaxWindow = int64_t{1} << 16;

// Scratch for the scaled values of one call (codecs are shared by threads: one per thread).
std::vector<float>& scratch(int which, int64_t n) {
  thread_local std::vector<float> buffers[3];
  auto& b = buffers[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b;
}

// Values per step for blocks of `len`: whole blocks, a multiple of len and even (nibble elements
// start on a byte), when a block fits in kStep; kStep values (even) for longer blocks, whose
// scales are measured in a pass of their own (encode's and decodeAddEncode's long-block passes).
int64_t stepLength(int64_t len) {
  if (len > kStep) return kStep;
  const int64_t step = (kStep / len) * len;
  return step % 2 ? 2 * step : step;
}

// dst[i] = kernels::scaleByPow2(x[i], shift) (kAdd: dst[i] += it, each scaled value rounded
// on its own, then added), for shift != 0. vscalefps gives x * 2^shift with one rounding (the
// exact product rounded to fp32, subnormals and overflow included) as the double multiply and
// conversion do; NaNs keep their payload, quieted, in both.
template <bool kAdd>
void scaleBlock(const float* x, int64_t m, int32_t shift, float* dst) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 exponent = _mm512_set1_ps(static_cast<float>(shift));
  for (; i + 16 <= m; i += 16) {  // whole steps unmasked (maxAbsBits)
    __m512 v = _mm512_scalef_ps(_mm512_loadu_ps(x + i), exponent);
    if constexpr (kAdd) v = _mm512_add_ps(_mm512_loadu_ps(dst + i), v);
    _mm512_storeu_ps(dst + i, v);
  }
  if (i < m) {
    const auto lanes = static_cast<__mmask16>((1u << (m - i)) - 1);
    __m512 v = _mm512_scalef_ps(_mm512_maskz_loadu_ps(lanes, x + i), exponent);
    if constexpr (kAdd) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, dst + i), v);
    _mm512_mask_storeu_ps(dst + i, lanes, v);
    i = m;
  }
#endif
  for (; i < m; ++i) {
    if constexpr (kAdd) {
      dst[i] += kernels::scaleByPow2(x[i], shift);
    } else {
      dst[i] = kernels::scaleByPow2(x[i], shift);
    }
  }
}

// f(block, first, count) for each piece of values [begin, begin + m) that lies in one block of
// `len` values: first is relative to begin. One division per call, not per piece (a 64-bit
// division per block of 32 cost the decode a quarter of its speed).
template <class F>
void forEachBlockPiece(int64_t len, int64_t begin, int64_t m, F&& f) {
  int64_t block = begin / len, offset = begin - block * len;
  for (int64_t first = 0; first < m; ++block, offset = 0) {
    const int64_t count = std::min(len - offset, m - first);
    f(block, first, count);
    first += count;
  }
}

// scaled[0, count) <- the values of a block with scale `code`, divided by its scale (the element
// values to round): zeros for a NaN block (its scale carries it), a copy for a unit scale.
void scaleToElements(const float* x, int64_t count, uint32_t code, float* scaled) {
  const int32_t shift = kernels::kScaleBias - static_cast<int32_t>(code);
  if (code == kernels::kNanScale) {
    std::fill(scaled, scaled + count, 0.0f);
  } else if (shift == 0) {
    std::memcpy(scaled, x, static_cast<size_t>(count) * sizeof(float));
  } else {
    scaleBlock<false>(x, count, shift, scaled);
  }
}

#if defined(__AVX512F__) && defined(__AVX512CD__)
// GCC 12 reports its own unmasked AVX-512 intrinsics here as reading an uninitialised value
// (the deliberate `__Y = __Y` of _mm512_undefined_epi32; see aps_target_warnings): a false
// positive in a system header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// The largest lane of each of sixteen vectors (unsigned), lane b of the result from m[b]: a
// tree of 128-bit and dword shuffles halving the candidates each level.
__m512i laneMaxima(const __m512i m[16]) {
  __m512i s1[8], s2[4], s3[2];
  for (int p = 0; p < 8; ++p) {  // 128-bit lanes: [2p | 2p | 2p+1 | 2p+1], 8 candidates each
    s1[p] = _mm512_max_epu32(_mm512_shuffle_i32x4(m[2 * p], m[2 * p + 1], 0x44),
                             _mm512_shuffle_i32x4(m[2 * p], m[2 * p + 1], 0xEE));
  }
  for (int q = 0; q < 4; ++q) {  // 128-bit lane j: vector 4q + j, 4 candidates
    s2[q] = _mm512_max_epu32(_mm512_shuffle_i32x4(s1[2 * q], s1[2 * q + 1], 0x88),
                             _mm512_shuffle_i32x4(s1[2 * q], s1[2 * q + 1], 0xDD));
  }
  for (int r = 0; r < 2; ++r) {  // 128-bit lane j: dwords 0-1 vector 8r + j, 2-3 vector 8r + 4 + j
    s3[r] = _mm512_max_epu32(_mm512_unpacklo_epi64(s2[2 * r], s2[2 * r + 1]),
                             _mm512_unpackhi_epi64(s2[2 * r], s2[2 * r + 1]));
  }
  // Dword pairs: 128-bit lane j holds vectors j, 8 + j, 4 + j, 12 + j.
  const __m512i a = _mm512_max_epu32(s3[0], _mm512_shuffle_epi32(s3[0], _MM_PERM_CDAB));
  const __m512i c = _mm512_max_epu32(s3[1], _mm512_shuffle_epi32(s3[1], _MM_PERM_CDAB));
  const __m512i mixed = _mm512_mask_mov_epi32(a, 0xAAAA, c);
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15), mixed);
}

// kernels::blockScaleCode of sixteen blocks' amax bits at once.
__m512i blockScaleCodes(__m512i amax, int32_t emax) {
  const __m512i fe = _mm512_srli_epi32(amax, 23);
  // floorLog2Bits: fe - 127 for normals, (31 - clz(mantissa)) - 149 for subnormals.
  const __m512i subLog2 = _mm512_sub_epi32(_mm512_set1_epi32(-118),
                                           _mm512_lzcnt_epi32(_mm512_and_si512(amax, _mm512_set1_epi32(0x7fffff))));
  const __m512i log2 = _mm512_mask_mov_epi32(_mm512_sub_epi32(fe, _mm512_set1_epi32(127)),
                                             _mm512_cmpeq_epi32_mask(fe, _mm512_setzero_si512()), subLog2);
  const __m512i e = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_sub_epi32(log2, _mm512_set1_epi32(emax)), _mm512_set1_epi32(-kernels::kScaleBias)),
      _mm512_set1_epi32(kernels::kScaleBias));
  __m512i code = _mm512_add_epi32(e, _mm512_set1_epi32(kernels::kScaleBias));
  code = _mm512_mask_mov_epi32(code, _mm512_cmpeq_epi32_mask(amax, _mm512_setzero_si512()),
                               _mm512_set1_epi32(kernels::kScaleBias));
  return _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(amax, _mm512_set1_epi32(kernels::kMaxFiniteBits)),
                               _mm512_set1_epi32(static_cast<int32_t>(kernels::kNanScale)));
}

// Sixteen blocks of 32 values from x: their scale codes into codes[0, 16) and their scaled
// values (kernels::blockScaledInput) into scaled[0, 512).
void scaleBlocks32x16(const float* x, int32_t emax, uint8_t* codes, float* scaled) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512i m[16];
  for (int b = 0; b < 16; ++b) {
    m[b] = _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(x + 32 * b), magnitude),
                            _mm512_and_si512(_mm512_loadu_si512(x + 32 * b + 16), magnitude));
  }
  const __m512i code = blockScaleCodes(laneMaxima(m), emax);
  _mm512_mask_cvtepi32_storeu_epi8(codes, 0xffff, code);
  const __m512 exponent = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(kernels::kScaleBias), code));
  const auto nanBlocks =
      static_cast<uint32_t>(_mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32(static_cast<int32_t>(kernels::kNanScale))));
  for (int b = 0; b < 16; ++b) {
    const __m512 e = _mm512_permutexvar_ps(_mm512_set1_epi32(b), exponent);
    const auto keep = static_cast<__mmask16>((nanBlocks >> b) & 1u ? 0 : 0xffff);  // NaN scale: zeros
    _mm512_storeu_ps(scaled + 32 * b, _mm512_maskz_scalef_ps(keep, _mm512_loadu_ps(x + 32 * b), e));
    _mm512_storeu_ps(scaled + 32 * b + 16, _mm512_maskz_scalef_ps(keep, _mm512_loadu_ps(x + 32 * b + 16), e));
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

BlockScaledCodec::BlockScaledCodec(const FloatFormat& element, RoundingMode rounding, int64_t blockSize)
    : elements_(saturating(element), rounding), blockSize_(blockSize), emax_(element.maxExponent()) {
  APS_CHECK(blockSize >= 0, "block scaling: block_size = {} must be >= 0 (0: one scale per chunk)", blockSize);
  APS_CHECK(!element.isFp32() && element.bits() <= 16,
            "block scaling: the element format must be narrower than fp32 and at most 16 bits, not {}", element.name);
}

std::string BlockScaledCodec::name() const {
  if (elements_.rounding() == RoundingMode::NearestEven) return fmt::format("{}/block{}", element().name, blockSize_);
  return fmt::format("{}:{}/block{}", element().name, roundingModeName(elements_.rounding()), blockSize_);
}

size_t BlockScaledCodec::encodedBytes(int64_t n) const {
  APS_ASSERT(n >= 0);
  return static_cast<size_t>(blocks(n)) + elements_.encodedBytes(n);
}

int64_t BlockScaledCodec::splitGranule() const {
  return blockSize_ > 0 ? std::lcm(blockSize_, int64_t{elements_.bytesPerValue() == 0 ? 2 : 1}) : 0;
}

uint8_t BlockScaledCodec::scaleCode(float amax) const {
  return static_cast<uint8_t>(kernels::blockScaleCode(kernels::absBits(amax), emax_));
}

// The block's scale and each element's scaled value are kernels::blockScaleCode and
// kernels::blockScaledInput / blockScaledOutput (precision/kernels/Scaling.h), shared with the
// CUDA codec; the elements are rounded by FloatCodec.
// Elements [begin, begin + m) of an encoding of n values (begin a multiple of the block length
// and even): their scale bytes and element bytes, from values x[0, m). `scaled` holds m floats.
void BlockScaledCodec::encodeRange(const float* x, int64_t n, int64_t begin, int64_t m, uint8_t* out, float* scaled,
                                   const EncodeContext& ctx) const {
  const int64_t len = blockLength(n);
  int64_t first = 0;
#if defined(__AVX512F__) && defined(__AVX512CD__)
  if (len == 32) {  // sixteen whole blocks at a time (begin is a multiple of 32)
    for (; first + 512 <= m; first += 512)
      scaleBlocks32x16(x + first, emax_, out + (begin + first) / 32, scaled + first);
  }
#endif
  forEachBlockPiece(len, begin + first, m - first, [&](int64_t block, int64_t at, int64_t count) {
    const uint32_t code = kernels::blockScaleCode(maxAbsBits(x + first + at, count), emax_);
    out[block] = static_cast<uint8_t>(code);
    scaleToElements(x + first + at, count, code, scaled + first + at);
  });
  EncodeContext local = ctx;
  local.offset = ctx.offset + begin;
  elements_.encode(scaled, m, out + blocks(n) + elements_.encodedBytes(begin), local);
}

// Elements [begin, begin + m) of an encoding of n values (begin even), from values x[0, m)
// whose blocks have the scale codes codes[block - firstBlock]: each value scaled by its block's
// code into scaled (m floats), then rounded to element bytes.
void BlockScaledCodec::encodeScaledRange(const float* x, int64_t n, int64_t begin, int64_t m, const uint8_t* codes,
                                         int64_t firstBlock, uint8_t* out, float* scaled,
                                         const EncodeContext& ctx) const {
  const int64_t len = blockLength(n);
  forEachBlockPiece(len, begin, m, [&](int64_t block, int64_t first, int64_t count) {
    scaleToElements(x + first, count, codes[block - firstBlock], scaled + first);
  });
  EncodeContext local = ctx;
  local.offset = ctx.offset + begin;
  elements_.encode(scaled, m, out + blocks(n) + elements_.encodedBytes(begin), local);
}

// The decoded values [begin, begin + m) of an encoding of n values (begin even) into out[0, m);
// with acc, added to acc[0, m) instead (out then holds the unscaled element values).
void BlockScaledCodec::decodeRange(const uint8_t* in, int64_t n, int64_t begin, int64_t m, float* out,
                                   float* acc) const {
  const int64_t len = blockLength(n);
  elements_.decode(in + blocks(n) + elements_.encodedBytes(begin), m, out);
  forEachBlockPiece(len, begin, m, [&](int64_t block, int64_t first, int64_t count) {
    const uint32_t code = in[block];
    const int32_t shift = static_cast<int32_t>(code) - kernels::kScaleBias;
    if (code == kernels::kNanScale) {
      const float nan = kernels::blockScaledOutput(0.0f, code);
      if (acc) {
        for (int64_t i = first; i < first + count; ++i) acc[i] += nan;
      } else {
        std::fill(out + first, out + first + count, nan);
      }
    } else if (acc) {
      scaleBlock<true>(out + first, count, shift, acc + first);
    } else if (shift != 0) {
      scaleBlock<false>(out + first, count, shift, out + first);
    }
  });
}

// Every step holds whole blocks where a block fits in kStep (stepLength), so a block's values
// stay in L1 from its scale's measure to its elements' rounding. Longer blocks take two passes:
// the scales (one maxAbsBits per block), then the elements kStep values at a time.
void BlockScaledCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  const int64_t len = blockLength(n), step = stepLength(len);
  float* scaled = scratch(0, std::min(step, n)).data();
  if (len > kStep) {
    for (int64_t b = 0; b < blocks(n); ++b) {
      out[b] =
          static_cast<uint8_t>(kernels::blockScaleCode(maxAbsBits(in + b * len, std::min(len, n - b * len)), emax_));
    }
    for (int64_t begin = 0; begin < n; begin += step) {
      encodeScaledRange(in + begin, n, begin, std::min(step, n - begin), out, 0, out, scaled, ctx);
    }
    return;
  }
  for (int64_t begin = 0; begin < n; begin += step) {
    encodeRange(in + begin, n, begin, std::min(step, n - begin), out, scaled, ctx);
  }
}

void BlockScaledCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t step = stepLength(blockLength(n));
  for (int64_t begin = 0; begin < n; begin += step) decodeRange(in, n, begin, std::min(step, n - begin), out + begin);
}

void BlockScaledCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  const int64_t step = stepLength(blockLength(n));
  float* values = scratch(0, std::min(step, n)).data();
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t m = std::min(step, n - begin);
    decodeRange(in, n, begin, m, values, acc + begin);
  }
}

void BlockScaledCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                       const EncodeContext& ctx) const {
  // A step's bytes of a and b are read before the same step's bytes of out are written, so
  // out may alias a or b.
  const int64_t len = blockLength(n), step = stepLength(len);
  float* va = scratch(0, std::min(step, n)).data();
  float* vb = scratch(1, std::min(step, n)).data();
  if (len <= kStep) {
    for (int64_t begin = 0; begin < n; begin += step) {
      const int64_t m = std::min(step, n - begin);
      decodeRange(a, n, begin, m, va);
      decodeRange(b, n, begin, m, vb, va);
      encodeRange(va, n, begin, m, out, vb, ctx);
    }
    return;
  }
  // Longer blocks: windows of whole blocks (one, or two for an odd length, so that every window
  // starts on an element byte). In a window, a first pass decodes and adds and measures each
  // block's scale; a second rounds the sums. Where the window fits kMaxWindow, the first pass
  // keeps the sums (in L2); past it (one scale per chunk of millions of values), the second
  // pass decodes and adds again (the same bits), which reads the inputs' bytes again: less
  // traffic than writing the sums to memory and reading them back. A window's scale bytes
  // reach out after its second pass: a block's scale byte of a or b is read in every step of it.
  const int64_t window = len % 2 ? 2 * len : len;
  const bool keepSums = window <= kMaxWindow;
  float* sums = keepSums ? scratch(2, window).data() : nullptr;
  for (int64_t w = 0; w < n; w += window) {
    const int64_t end = std::min(n, w + window);
    const int64_t firstBlock = w / len, lastBlock = (end - 1) / len;
    uint32_t amax[2] = {0, 0};
    for (int64_t begin = w; begin < end; begin += step) {
      const int64_t m = std::min(step, end - begin);
      float* sum = keepSums ? sums + (begin - w) : va;
      decodeRange(a, n, begin, m, sum);
      decodeRange(b, n, begin, m, vb, sum);
      forEachBlockPiece(len, begin, m, [&](int64_t block, int64_t first, int64_t count) {
        amax[block - firstBlock] = std::max(amax[block - firstBlock], maxAbsBits(sum + first, count));
      });
    }
    uint8_t codes[2];
    for (int k = 0; k < 2; ++k) codes[k] = static_cast<uint8_t>(kernels::blockScaleCode(amax[k], emax_));
    for (int64_t begin = w; begin < end; begin += step) {
      const int64_t m = std::min(step, end - begin);
      const float* sum = keepSums ? sums + (begin - w) : va;
      if (!keepSums) {
        decodeRange(a, n, begin, m, va);
        decodeRange(b, n, begin, m, vb, va);
      }
      encodeScaledRange(sum, n, begin, m, codes, firstBlock, out, vb, ctx);
    }
    std::copy(codes, codes + (lastBlock - firstBlock + 1), out + firstBlock);
  }
}

}  // namespace aps::precision
