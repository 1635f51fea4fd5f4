#include "precision/DettmersCodec.h"

#include "framework/core/Error.h"
#include "precision/ApsScaler.h"
#include "precision/MaxLanes.h"
#include "precision/kernels/Dettmers.h"
#include "precision/kernels/Scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

namespace aps::precision {

namespace {
// A tree type's code book from its signed midpoints: 0 and 1.0 added, sorted, each value
// computed in double rounded once to float.
std::array<float, 256> sortedBook(std::vector<double> values) {
  values.push_back(0.0);
  values.push_back(1.0);
  std::sort(values.begin(), values.end());
  APS_ASSERT(values.size() == 256);
  std::array<float, 256> book{};
  for (size_t i = 0; i < 256; ++i) book[i] = static_cast<float>(values[i]);
  return book;
}
}  // namespace

std::array<float, 256> DettmersCodec::dynamicTreeCodeBook() {
  // docs/ALGORITHMS.md, Dettmers' 8-bit types: for i = 0..6, the midpoints of linspace(0.1, 1, 2^i + 1) scaled by
  // 10^(i-6), their negatives, plus 0 and 1.0 (2 * 127 + 2 = 256 values), sorted. Computed
  // in double, then rounded once to float.
  std::vector<double> values;
  for (int i = 0; i <= 6; ++i) {
    const int items = (1 << i) + 1;
    const double scale = std::pow(10.0, i - 6);
    for (int k = 0; k + 1 < items; ++k) {
      const double lo = 0.1 + 0.9 * k / (items - 1);
      const double hi = 0.1 + 0.9 * (k + 1) / (items - 1);
      const double mid = scale * (lo + hi) / 2.0;
      values.push_back(mid);
      values.push_back(-mid);
    }
  }
  return sortedBook(std::move(values));
}

std::array<float, 256> DettmersCodec::linearCodeBook() {
  std::array<float, 256> book{};
  for (int c = 0; c < 255; ++c) book[c] = static_cast<float>((c - 127) / 127.0);
  book[255] = 1.0f;  // unused duplicate of the largest code, keeps the table sorted
  return book;
}

std::array<float, 256> DettmersCodec::staticTreeCodeBook() {
  // docs/ALGORITHMS.md, Dettmers' 8-bit types: for e = 0..7 (the 3-bit exponent) the 16
  // midpoints of linspace(0.1, 1, 17) (the leaves of a 4-level bisection of (0.1, 1)) scaled
  // by 10^-e, less the smallest, their negatives, plus 0 and 1.0, sorted. Computed in
  // double, then rounded once to float.
  std::vector<double> values;
  for (int e = 0; e < 8; ++e) {
    const double scale = std::pow(10.0, -e);
    for (int k = 0; k < 16; ++k) {
      if (e == 7 && k == 0) continue;  // its place goes to 0
      const double lo = 0.1 + 0.9 * k / 16;
      const double hi = 0.1 + 0.9 * (k + 1) / 16;
      const double mid = scale * (lo + hi) / 2.0;
      values.push_back(mid);
      values.push_back(-mid);
    }
  }
  return sortedBook(std::move(values));
}

std::array<float, 256> DettmersCodec::codeBookOf(Type type) {
  switch (type) {
    case Type::DynamicTree:
      return dynamicTreeCodeBook();
    case Type::Linear:
      return linearCodeBook();
    case Type::StaticTree:
      return staticTreeCodeBook();
  }
  APS_FAIL("dettmers codec: unknown type");
}

const char* DettmersCodec::typeName(Type type) {
  switch (type) {
    case Type::DynamicTree:
      return "dettmers_dynamic";
    case Type::Linear:
      return "dettmers_linear";
    case Type::StaticTree:
      return "dettmers_static";
  }
  APS_FAIL("dettmers codec: unknown type");
}

DettmersCodec::DettmersCodec(Type type, int64_t blockSize) : type_(type), blockSize_(blockSize) {
  APS_CHECK(blockSize >= 0, "dettmers codec: block_size = {} must be >= 0", blockSize);
  codes_ = codeBookOf(type);
  for (int k = 0; k < 255; ++k) midpoints_[k] = 0.5f * (codes_[k] + codes_[k + 1]);
  for (int c = 0; c < 256; ++c) {
    const auto bits = std::bit_cast<uint32_t>(codes_[c]);
    for (int p = 0; p < 4; ++p) codeBytes_[256 * p + c] = static_cast<uint8_t>(bits >> (8 * p));
  }
  midpoints_[255] = std::numeric_limits<float>::infinity();
  bucketBase_.resize(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    const bool negative = (b & 0x8000u) != 0;
    // The bucket's smallest and largest values (for negative buckets the largest
    // magnitude is the smallest value).
    const float lo = std::bit_cast<float>(negative ? (b << 16) | 0xffffu : b << 16);
    const float hi = std::bit_cast<float>(negative ? b << 16 : (b << 16) | 0xffffu);
    // +inf (reached when a block's absmax is so small that its reciprocal overflows) lies
    // above every midpoint; the rest of its bucket is NaN, which only nearestCode's own
    // check sees (arithmetic never yields these signalling NaNs).
    if (lo == std::numeric_limits<float>::infinity()) {
      bucketBase_[b] = 255;
      continue;
    }
    if (std::isnan(lo) || std::isnan(hi)) continue;
    const auto below = std::lower_bound(midpoints_.begin(), midpoints_.begin() + 255, lo) - midpoints_.begin();
    const auto upTo = std::upper_bound(midpoints_.begin(), midpoints_.begin() + 255, hi) - midpoints_.begin();
    if (upTo - below > 1) {  // two midpoints in one bucket: fall back to binary search
      bucketBase_.clear();
      break;
    }
    bucketBase_[b] = static_cast<uint8_t>(below);
  }
  // The vector search folds the sign (SearchTables): code 127 is 0 and the midpoints below it
  // mirror the 127 above it, bit for bit. All three code books are built so; a new one that is not
  // fails here rather than encode wrongly.
  for (int j = 0; j < 127; ++j) {
    APS_CHECK(
        std::bit_cast<uint32_t>(midpoints_[126 - j]) == (std::bit_cast<uint32_t>(midpoints_[127 + j]) | 0x80000000u),
        "dettmers codec: the code book is not symmetric about code 127 (midpoint {})", 126 - j);
  }
  for (int level = 0; level < 7; ++level) {
    const int step = 64 >> level;
    for (int r = 0; r < (1 << level); ++r) {
      int j = 0;  // r's low `level` bits reversed
      for (int bit = 0; bit < level; ++bit) j |= ((r >> bit) & 1) << (level - 1 - bit);
      searchLevels_[(1 << level) - 1 + r] = std::bit_cast<uint32_t>(midpoints_[127 + j * 2 * step + step - 1]);
    }
  }
}

std::string DettmersCodec::name() const {
  std::string n = typeName(type_);
  if (blockSize_ > 0) n += fmt::format("/block{}", blockSize_);
  return n;
}

size_t DettmersCodec::encodedBytes(int64_t n) const {
  APS_ASSERT(n >= 0);
  if (n == 0) return 0;
  const int64_t block = blockLength(n);
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<size_t>(n + 4 * blocks);
}

uint8_t DettmersCodec::nearestCode(float v) const {
  // The bucket shortcut is the CPU's fast form of kernels::dettmersNearestCode (the same index
  // for every v: DettmersCodecTest.BucketShortcutMatchesTheSharedSearch).
  if (!bucketBase_.empty() && v == v) {
    const uint32_t base = bucketBase_[std::bit_cast<uint32_t>(v) >> 16];
    uint32_t idx = base + (midpoints_[base] < v ? 1u : 0u);
    if (type_ == Type::Linear && idx == 255) idx = 254;
    return static_cast<uint8_t>(idx);
  }
  // The shared search (the CUDA codec's): the number of midpoints below v.
  return static_cast<uint8_t>(kernels::dettmersNearestCode(v, midpoints_.data(), topCode()));
}

uint8_t DettmersCodec::nearestCodeBySearch(float v) const {
  return static_cast<uint8_t>(kernels::dettmersNearestCode(v, midpoints_.data(), topCode()));
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace {

// kernels::dettmersNearestCode in sixteen lanes, with the sign folded. Code 127 is 0; above it
// lie the midpoints P_0 < ... < P_127 (P_j = midpoints_[127 + j]), and the 127 below it mirror
// P_0..P_126 bit for bit (checked in the constructor). So for v >= 0 the code is
// 127 + #{P_j < v}, and for v < 0 it is 127 - #{P_j <= |v|, j < 127}: seven comparison levels
// over P_0..P_126 with the key |v| (one ulp more for v < 0, making <= a <), compared as unsigned
// integers (the order of non-negative floats), where the full search took eight. The search
// leaves out code 255 (v > P_127), which a comparison per lane adds (aboveTop64), and +NaN
// (code 0), which zeroNaN mends in blocks without a finite scale.
//
// Each level's midpoint is found by permutes over that level's table
// (DettmersCodec::searchLevels_). The search's index is kept bit-reversed: level L's comparison
// sets bit L of r (bit 6 - L of the count), one masked or, and r's low L bits index the level's
// table, stored in that order. Bit 7 of r holds the sign (no permute reads it).
struct SearchTables {
  __m512i first, small[4], l5[2], l6[4];
  __m512i topBits;  // P_127 as an integer
  SearchTables(const uint32_t* levels, float topMidpoint) {
    first = _mm512_set1_epi32(static_cast<int>(levels[0]));
    for (int k = 0; k < 4; ++k) small[k] = _mm512_loadu_si512(levels + (2 << k) - 1);
    for (int k = 0; k < 2; ++k) l5[k] = _mm512_loadu_si512(levels + 31 + 16 * k);
    for (int k = 0; k < 4; ++k) l6[k] = _mm512_loadu_si512(levels + 63 + 16 * k);
    topBits = _mm512_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(topMidpoint)));
  }
};

// Entry j (< 16 * count) of `count` registers, by two-source permutes (an index's low five
// bits) and blends on bits 5 and 6 of j, given as masks.
template <int kCount>
inline __m512 lookup(const __m512* t, __m512i j, __mmask16 bit5, __mmask16 bit6) {
  if constexpr (kCount == 2) {
    return _mm512_permutex2var_ps(t[0], j, t[1]);
  } else {
    const __mmask16 high = kCount == 4 ? bit5 : bit6;
    return _mm512_mask_mov_ps(lookup<kCount / 2>(t, j, bit5, bit6), high,
                              lookup<kCount / 2>(t + kCount / 2, j, bit5, bit6));
  }
}

// kVectors vectors side by side, level by level: each level waits on the previous one's
// comparison (a permute, a compare, a masked or: about ten cycles), so the chains hide one
// another's latency; eight of them keep the shuffle unit busy where four left it waiting.
template <int kVectors>
inline void searchCodes(const __m512 v[kVectors], const SearchTables& t, __m512i r[kVectors]) {
  __m512i key[kVectors];
  for (int k = 0; k < kVectors; ++k) {
    const __m512i bits = _mm512_castps_si512(v[k]);
    const __m512i negative = _mm512_srli_epi32(bits, 31);
    key[k] = _mm512_add_epi32(absBitsLanes(bits), negative);
    r[k] = _mm512_slli_epi32(negative, 7);
  }
  int bit = 1;
  const auto level = [&](int k, __m512i mid) {
    const __mmask16 below = _mm512_cmplt_epu32_mask(mid, key[k]);
    r[k] = _mm512_mask_or_epi32(r[k], below, r[k], _mm512_set1_epi32(bit));
    return below;
  };
  for (int k = 0; k < kVectors; ++k) level(k, t.first);
  bit <<= 1;
  for (int s = 0; s < 4; ++s, bit <<= 1) {
    for (int k = 0; k < kVectors; ++k) level(k, _mm512_permutexvar_epi32(r[k], t.small[s]));
  }
  // Level 5 sets bit 5 of r: its comparison is the last level's blend mask.
  __mmask16 bit5[kVectors];
  for (int k = 0; k < kVectors; ++k) bit5[k] = level(k, _mm512_permutex2var_epi32(t.l5[0], r[k], t.l5[1]));
  bit <<= 1;
  for (int k = 0; k < kVectors; ++k) {
    level(k, _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t.l6[0], r[k], t.l6[1]), bit5[k],
                                   _mm512_permutex2var_epi32(t.l6[2], r[k], t.l6[3])));
  }
}

// Sixteen lanes' search results (r) of each of four vectors to 64 bytes in element order
// (packus works within 128-bit lanes; the permute restores the order): the sign in bit 7, the
// seven comparisons below it.
inline __m512i packSearch64(const __m512i r[4]) {
  const __m512i packed = _mm512_packus_epi16(_mm512_packus_epi32(r[0], r[1]), _mm512_packus_epi32(r[2], r[3]));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), packed);
}

// packSearch64's bytes to codes: each byte's seven comparison bits are reversed back into a
// count by two nibble lookups, whose high-nibble table also gives 127 + or - (the sign), and
// the sign picks whether the low nibble's part is added or taken away.
inline __m512i codesOf(__m512i searched) {
  // Low nibble: levels 0-3, count bits 6-3. High nibble: levels 4-6 (count bits 2-0), the sign.
  const auto byte = [](int b) { return static_cast<char>(b); };
  const __m512i low =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 64, 32, 96, 16, 80, 48, 112, 8, 72, 40, 104, 24, 88, 56, 120));
  const __m512i high = _mm512_broadcast_i32x4(
      _mm_setr_epi8(byte(127), byte(127 + 4), byte(127 + 2), byte(127 + 6), byte(127 + 1), byte(127 + 5), byte(127 + 3),
                    byte(127 + 7), byte(127), byte(127 - 4), byte(127 - 2), byte(127 - 6), byte(127 - 1), byte(127 - 5),
                    byte(127 - 3), byte(127 - 7)));
  const __m512i nibble = _mm512_set1_epi8(15);
  const __m512i a = _mm512_shuffle_epi8(high, _mm512_and_si512(_mm512_srli_epi16(searched, 4), nibble));
  const __m512i b = _mm512_shuffle_epi8(low, _mm512_and_si512(searched, nibble));
  return _mm512_mask_sub_epi8(_mm512_add_epi8(a, b), _mm512_movepi8_mask(searched), a, b);
}

// The lanes of v[0..3] above P_127 as signed integers (code 255: +inf too, and +NaN, which
// zeroNaN mends), as 64 byte lanes. A comparison per lane rather than a branch on the rare
// lanes: a block's absmax is one of them when positive, and a branch on it mispredicted.
inline __mmask64 aboveTop64(const __m512 v[4], const SearchTables& t) {
  __mmask16 m[4];
  for (int k = 0; k < 4; ++k) m[k] = _mm512_cmpgt_epi32_mask(_mm512_castps_si512(v[k]), t.topBits);
  return _mm512_kunpackd(_mm512_kunpackw(m[3], m[2]), _mm512_kunpackw(m[1], m[0]));
}

// codes with the NaN lanes of v[0..3] at code 0 (a +NaN's search and aboveTop64 gave 255).
inline __m512i zeroNaN(const __m512 v[4], __m512i codes) {
  uint64_t nan = 0;
  for (int k = 0; k < 4; ++k) nan |= uint64_t{_mm512_cmp_ps_mask(v[k], v[k], _CMP_UNORD_Q)} << (16 * k);
  return _mm512_maskz_mov_epi8(_cvtu64_mask64(~nan), codes);
}

// Whether an inverse scale leaves no lane NaN (encodeScaledLanes' `finite`): a finite,
// non-zero inverse comes from a finite absmax, and every scaled value then lies within [-1, 1]
// but for rounding.
inline bool finiteInverse(float inv) { return inv > 0.0f && inv < std::numeric_limits<float>::infinity(); }

// Lanes (fewer than 16 at the end of n) from i on.
inline __mmask16 lanesFrom(int64_t i, int64_t n) {
  return static_cast<__mmask16>((uint32_t{1} << std::clamp<int64_t>(n - i, 0, 16)) - 1);
}

// codes[i] = the nearest code of load(i, lanes) * inv, capped at top, 128 values per step;
// load64(i, v) gives the 64 values from i in v[0..3] for whole steps (by default load's).
// Whole steps load with every lane on (the mask a constant, so plain loads and stores); only
// the last step masks. Masked loads and stores in every step made these loops several times
// slower on AMD Zen 4. Blocks without a finite scale load their values again for zeroNaN, so
// that they need not stay in registers through the search.
//
// scaleOf(i) gives the inverse scales of the sixteen lanes from i (one block's inverse, or each
// lane's own block's in encodeGroupedLanes). `finite` says that every lane's inverse passes
// finiteInverse, so no lane is NaN and zeroNaN need not run.
template <typename Scale, typename Load, typename Load64>
void encodeScaledLanes(int64_t n, Scale scaleOf, bool finite, const SearchTables& tables, uint32_t top, uint8_t* codes,
                       Load load, Load64 load64) {
  const __m512i cap = _mm512_set1_epi8(static_cast<char>(top));
  // A step of 16 * kVectors values from i: whole (plain loads through load64, plain stores) or
  // the last, masked. Eight vectors side by side where there are more than 64 values: a block of
  // 65 to 127 values (or such a tail) searched as two steps of four was held up by the search's
  // latency twice.
  const auto encodeStep = [&](auto vectors, auto whole, int64_t i) {
    constexpr int kVectors = decltype(vectors)::value;
    __m512 v[kVectors];
    __m512i c[kVectors];
    const auto loadScaled = [&] {
      if constexpr (decltype(whole)::value) {
        for (int h = 0; h < kVectors / 4; ++h) load64(i + 64 * h, v + 4 * h);
      } else {
        for (int k = 0; k < kVectors; ++k) v[k] = load(i + 16 * k, lanesFrom(i + 16 * k, n));
      }
      for (int k = 0; k < kVectors; ++k) v[k] = _mm512_mul_ps(v[k], scaleOf(i + 16 * k));
    };
    loadScaled();
    __mmask64 above[kVectors / 4];
    for (int h = 0; h < kVectors / 4; ++h) above[h] = aboveTop64(v + 4 * h, tables);
    searchCodes<kVectors>(v, tables, c);
    if (!finite) loadScaled();  // for zeroNaN, rather than keep them in registers
    for (int h = 0; h < kVectors / 4; ++h) {
      __m512i bytes =
          _mm512_mask_mov_epi8(codesOf(packSearch64(c + 4 * h)), above[h], _mm512_set1_epi8(static_cast<char>(255)));
      if (!finite) bytes = zeroNaN(v + 4 * h, bytes);
      bytes = _mm512_min_epu8(bytes, cap);
      const int64_t left = n - i - 64 * h;
      if (decltype(whole)::value || left >= 64) {
        _mm512_storeu_si512(codes + i + 64 * h, bytes);
      } else if (left > 0) {
        _mm512_mask_storeu_epi8(codes + i + 64 * h, (__mmask64{1} << left) - 1, bytes);
      }
    }
  };
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) encodeStep(std::integral_constant<int, 8>{}, std::true_type{}, i);
  if (n - i > 64) {
    encodeStep(std::integral_constant<int, 8>{}, std::false_type{}, i);
  } else if (n - i == 64) {
    encodeStep(std::integral_constant<int, 4>{}, std::true_type{}, i);
  } else if (i < n) {
    encodeStep(std::integral_constant<int, 4>{}, std::false_type{}, i);
  }
}

// encodeScaledLanes with one inverse scale for all n values.
template <typename Load, typename Load64>
void encodeLanes(int64_t n, float inv, const SearchTables& tables, uint32_t top, uint8_t* codes, Load load,
                 Load64 load64) {
  const __m512 scale = _mm512_set1_ps(inv);
  encodeScaledLanes(
      n, [scale](int64_t) { return scale; }, finiteInverse(inv), tables, top, codes, load, load64);
}

// A whole step's 64 values by four unmasked loads.
template <typename Load>
auto wholeLoads(Load load) {
  return [load](int64_t i, __m512* v) {
    for (int k = 0; k < 4; ++k) v[k] = load(i + 16 * k, __mmask16{0xffff});
  };
}

template <typename Load>
void encodeLanes(int64_t n, float inv, const SearchTables& tables, uint32_t top, uint8_t* codes, Load load) {
  encodeLanes(n, inv, tables, top, codes, load, wholeLoads(load));
}

// One block of encode: its absmax (the scale) and codes, with the caller's search tables
// (loaded once per call, not once per block).
void encodeBlockLanes(const float* in, int64_t n, uint8_t* out, const SearchTables& tables, uint32_t top) {
  // absmax as the integer max of |bits| (NaN > inf > finite in this order, so a non-finite
  // value makes the scale non-finite, the block decodes non-finite and the overflow stays
  // visible to the receiver).
  const float absmax = std::bit_cast<float>(maxAbsBits(in, n));
  std::memcpy(out, &absmax, 4);
  encodeLanes(n, kernels::dettmersInverse(absmax), tables, top, out + 4,
              [in](int64_t i, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, in + i); });
}

// Blocks whose length is not a multiple of 64, up to kGroupValues / 2, are encoded in groups
// of up to 16 blocks and kGroupValues values, the group's values searched as one run
// (encodeScaledLanes) with each lane scaled by its own block's inverse. Block by block, a block
// of 100 values took a masked step of 128 lanes, and each block's search waited on its own
// absmax. Blocks of a multiple of 64 leave no lanes idle and stay block by block: at 16 M values
// grouping made blocks of 256 slower (0.52 against 0.56 of memcpy), in cache faster.
constexpr int64_t kGroupValues = 1024;

bool encodesInGroups(int64_t block) { return block % 64 != 0 && block <= kGroupValues / 2; }

// n bytes (a block's codes) from src to dst: whole 64-byte chunks, the last one overlapping the
// one before it rather than masked (masked stores are slow on AMD Zen 4).
inline void copyCodes(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n < 64) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(dst + i, _mm512_loadu_si512(src + i));
  if (i < n) _mm512_storeu_si512(dst + n - 64, _mm512_loadu_si512(src + n - 64));
}

// The values of a group (see encodesInGroups): group(first, m, absmax) gives the m values from
// first and their blocks' absmaxes (absmax[k] for block k of the group), and may prefetch the
// next group's input.
struct GroupValues {
  const float* values;
  const float* next;  // the next group's values, to prefetch while this group is searched, or null
};

// Blocks of `block` values in groups: each group's scales (absmax from group(), written to out
// once the group's input is read, so out may alias it), its codes into a buffer as one run,
// then each block's codes to their place after its scale.
template <typename Group>
void encodeGroups(int64_t n, int64_t block, uint8_t* out, const SearchTables& tables, uint32_t top, Group group) {
  const int64_t perGroup = std::clamp<int64_t>(kGroupValues / block, 1, 16);
  alignas(64) uint8_t codes[kGroupValues];
  alignas(64) float absmax[16] = {};
  // Each lane's inverse scale, its block's, filled 16 lanes at a time (a block's last store
  // runs into the next block, which overwrites it; up to 15 past the group's end). A load per
  // vector where a permute of the group's inverses took the shuffle unit the search is bound by.
  alignas(64) float inverses[kGroupValues + 16] = {};
  for (int64_t first = 0; first < n; first += perGroup * block) {
    const int64_t m = std::min(perGroup * block, n - first);
    const int64_t blocks = (m + block - 1) / block;
    const GroupValues in = group(first, m, absmax);
    uint8_t* groupOut = out + first + 4 * (first / block);
    bool finite = true;
    for (int64_t k = 0; k < blocks; ++k) {
      std::memcpy(groupOut + k * (block + 4), absmax + k, 4);
      const float inverse = kernels::dettmersInverse(absmax[k]);
      finite = finite && finiteInverse(inverse);
      const __m512 lanes = _mm512_set1_ps(inverse);
      for (int64_t j = k * block; j < std::min(m, (k + 1) * block); j += 16) _mm512_storeu_ps(inverses + j, lanes);
    }
    const auto scaleOf = [&](int64_t i) { return _mm512_load_ps(inverses + i); };
    const auto load = [&in](int64_t i, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, in.values + i); };
    encodeScaledLanes(m, scaleOf, finite, tables, top, codes, load, [&](int64_t i, __m512* v) {
      if (in.next != nullptr) {
        for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(in.next + i + 16 * k), _MM_HINT_T0);
      }
      for (int k = 0; k < 4; ++k) v[k] = _mm512_loadu_ps(in.values + i + 16 * k);
    });
    for (int64_t k = 0; k < blocks; ++k) {
      copyCodes(groupOut + k * (block + 4) + 4, codes + k * block, std::min(block, m - k * block));
    }
  }
}

// encode's blocks in groups, read in place. The next group's values are fetched while this
// group is searched: its absmax pass would otherwise wait on memory with nothing else to do.
void encodeGroupedLanes(const float* in, int64_t n, int64_t block, uint8_t* out, const SearchTables& tables,
                        uint32_t top) {
  encodeGroups(n, block, out, tables, top, [&](int64_t first, int64_t m, float* absmax) {
    for (int64_t k = 0; k * block < m; ++k) {
      absmax[k] = std::bit_cast<float>(maxAbsBitsLanes(in + first + k * block, std::min(block, m - k * block)));
    }
    return GroupValues{in + first, first + 2 * m <= n ? in + first + m : nullptr};
  });
}

// The values of sixteen codes (masked lanes 0): book[c] * absmax by permutes over the 256
// entries, the product rounded on its own (a builtin, so the compiler cannot fuse it with a
// following add into a multiply-add, which the scalar loops never do).
struct CodeBook {
  __m512 t[16];
#if defined(__AVX512VBMI__)
  __m512i planes[4][4];  // byte p of book[c] at byte c of planes[p] (256 bytes, four registers)
#endif
  CodeBook(const float* book, const uint8_t* bytes) {
    for (int k = 0; k < 16; ++k) t[k] = _mm512_loadu_ps(book + 16 * k);
#if defined(__AVX512VBMI__)
    for (int p = 0; p < 4; ++p) {
      for (int k = 0; k < 4; ++k) planes[p][k] = _mm512_load_si512(bytes + 256 * p + 64 * k);
    }
#else
    (void)bytes;
#endif
  }
#if defined(__AVX512VBMI__)
  // Sixty-four codes' values times scale, in element order, by byte permutes: each of the four
  // bytes of book[c] from its plane (two 128-byte lookups, bit 7 choosing), then the bytes
  // interleaved into floats. The codes are first put in the order the in-lane unpacks undo:
  // byte 16 L + 4 r + s holds the code of element 16 r + 4 L + s. About a third of decode's
  // shuffles per value.
  void decode64(const uint8_t* codes, __m512 scale, __m512 out[4]) const {
    const __m512i order = _mm512_set_epi8(63, 62, 61, 60, 47, 46, 45, 44, 31, 30, 29, 28, 15, 14, 13, 12,  //
                                          59, 58, 57, 56, 43, 42, 41, 40, 27, 26, 25, 24, 11, 10, 9, 8,    //
                                          55, 54, 53, 52, 39, 38, 37, 36, 23, 22, 21, 20, 7, 6, 5, 4,      //
                                          51, 50, 49, 48, 35, 34, 33, 32, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i c = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(codes));
    const __mmask64 high = _mm512_movepi8_mask(c);
    __m512i b[4];
    for (int p = 0; p < 4; ++p) {
      b[p] = _mm512_mask_mov_epi8(_mm512_permutex2var_epi8(planes[p][0], c, planes[p][1]), high,
                                  _mm512_permutex2var_epi8(planes[p][2], c, planes[p][3]));
    }
    const __m512i lo01 = _mm512_unpacklo_epi8(b[0], b[1]), hi01 = _mm512_unpackhi_epi8(b[0], b[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(b[2], b[3]), hi23 = _mm512_unpackhi_epi8(b[2], b[3]);
    const __m512i r[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                          _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    for (int k = 0; k < 4; ++k)
      out[k] = _mm512_mul_round_ps(_mm512_castsi512_ps(r[k]), scale, _MM_FROUND_CUR_DIRECTION);
  }
#endif
  __m512 decode(const uint8_t* codes, __mmask16 lanes, __m512 scale) const {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, codes));
    const __mmask16 bit5 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(32));
    const __mmask16 bit6 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(64));
    const __mmask16 bit7 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(128));
    const __m512 code = _mm512_mask_mov_ps(lookup<8>(t, c, bit5, bit6), bit7, lookup<8>(t + 8, c, bit5, bit6));
    return _mm512_maskz_mul_round_ps(lanes, code, scale, _MM_FROUND_CUR_DIRECTION);
  }
};

// decodeBlock in vector lanes, with the caller's code book registers (loaded once per call).
void decodeBlockLanes(const uint8_t* in, int64_t n, float* out, bool add, const CodeBook& book) {
  float absmax;
  std::memcpy(&absmax, in, 4);
  const uint8_t* codes = in + 4;
  const __m512 scale = _mm512_set1_ps(absmax);
  int64_t i = 0;
#if defined(__AVX512VBMI__)
  for (; i + 64 <= n; i += 64) {
    __m512 v[4];
    book.decode64(codes + i, scale, v);
    for (int k = 0; k < 4; ++k) {
      if (add) v[k] = _mm512_add_ps(_mm512_loadu_ps(out + i + 16 * k), v[k]);
      _mm512_storeu_ps(out + i + 16 * k, v[k]);
    }
  }
#endif
  // Whole steps with plain loads and stores (as encodeLanes), then the last values masked.
  if (add) {
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(out + i), book.decode(codes + i, 0xffff, scale)));
    }
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, book.decode(codes + i, 0xffff, scale));
  }
  if (i < n) {
    const __mmask16 lanes = lanesFrom(i, n);
    __m512 v = book.decode(codes + i, lanes, scale);
    if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out + i), v);
    _mm512_mask_storeu_ps(out + i, lanes, v);
  }
}

// decodeBlock(a) + decodeBlock(b) of two blocks (a and b at their scales), sixteen lanes from i
// (masked lanes 0) or, with VBMI, 64 values from i.
struct SummedBlocks {
  const uint8_t* a;
  const uint8_t* b;
  const CodeBook& book;
  __m512 scaleA, scaleB;
  SummedBlocks(const uint8_t* blockA, const uint8_t* blockB, const CodeBook& codeBook)
      : a(blockA), b(blockB), book(codeBook) {
    float absA, absB;
    std::memcpy(&absA, a, 4);
    std::memcpy(&absB, b, 4);
    scaleA = _mm512_set1_ps(absA);
    scaleB = _mm512_set1_ps(absB);
  }
  __m512 operator()(int64_t i, __mmask16 lanes) const {
    return _mm512_add_ps(book.decode(a + 4 + i, lanes, scaleA), book.decode(b + 4 + i, lanes, scaleB));
  }
#if defined(__AVX512VBMI__)
  void sum64(int64_t i, __m512 v[4]) const {
    __m512 vb[4];
    book.decode64(a + 4 + i, scaleA, v);
    book.decode64(b + 4 + i, scaleB, vb);
    for (int k = 0; k < 4; ++k) v[k] = _mm512_add_ps(v[k], vb[k]);
  }
#endif
};

// The n sums of SummedBlocks(a, b), stored to dst unless dst is null; gives their largest |bits|.
// `readable` bytes from a and from b may be read: where the following block's bytes lie beyond
// this one's, its last 64-value step reads them rather than go 16 lanes at a time, and stores
// up to 63 values past n (dst has room for them), which are left out of the maximum. Otherwise
// up to 15 zeros past n. A null dst comes with readable = 4 + n (no step past n).
uint32_t sumBlockLanes(const uint8_t* a, const uint8_t* b, int64_t n, int64_t readable, const CodeBook& book,
                       float* dst) {
  const SummedBlocks sum(a, b, book);  // a local: dst's stores cannot alias its scales
  __m512i acc = _mm512_setzero_si512();
  const auto measure = [&](int64_t i, __m512 v) {
    if (dst != nullptr) _mm512_storeu_ps(dst + i, v);
    acc = _mm512_max_epu32(acc, absBitsLanes(_mm512_castps_si512(v)));
  };
  int64_t i = 0;
#if defined(__AVX512VBMI__)
  __m512 v[4];
  for (; i + 64 <= n; i += 64) {
    sum.sum64(i, v);
    for (int k = 0; k < 4; ++k) measure(i + 16 * k, v[k]);
  }
  if (i < n && 4 + i + 64 <= readable) {
    sum.sum64(i, v);
    for (int k = 0; k < 4; ++k) {
      _mm512_storeu_ps(dst + i + 16 * k, v[k]);
      acc = _mm512_mask_max_epu32(acc, lanesFrom(i + 16 * k, n), acc, absBitsLanes(_mm512_castps_si512(v[k])));
    }
    i = n;
  }
#else
  (void)readable;
#endif
  for (; i + 16 <= n; i += 16) measure(i, sum(i, 0xffff));  // whole steps unmasked (encodeLanes)
  if (i < n) measure(i, sum(i, lanesFrom(i, n)));
  return maxLane(acc);
}

// encodeBlock of decodeBlock(a) + decodeBlock(b): one pass for the sums' absmax, one to encode
// them. Blocks that fit keep their sums in an L1 buffer between the passes; longer ones (a
// whole chunk as one block) recompute them in registers rather than go through memory. Both
// scales are read first and each step reads its codes before writing, so out may alias a or b.
void sumEncodeBlockLanes(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out, const CodeBook& book,
                         const SearchTables& tables, uint32_t top) {
  constexpr int64_t kBuffered = 2048;
  alignas(64) float buffer[kBuffered];
  const bool buffered = n <= kBuffered;
  const float absmax = std::bit_cast<float>(sumBlockLanes(a, b, n, 4 + n, book, buffered ? buffer : nullptr));
  const float inv = kernels::dettmersInverse(absmax);
  if (buffered) {
    encodeLanes(n, inv, tables, top, out + 4,
                [&](int64_t k, __mmask16 m) { return _mm512_maskz_load_ps(m, buffer + k); });
  } else {
    const SummedBlocks sum(a, b, book);
#if defined(__AVX512VBMI__)
    encodeLanes(n, inv, tables, top, out + 4, sum, [&sum](int64_t k, __m512* v) { sum.sum64(k, v); });
#else
    encodeLanes(n, inv, tables, top, out + 4, sum);
#endif
  }
  std::memcpy(out, &absmax, 4);
}

// decodeAddEncode's blocks in groups (encodesInGroups): each group's sums into a buffer, block
// by block with their absmaxes, then encoded from it (encodeGroups writes the group's output
// only after reading its input, so out may alias a or b).
void sumEncodeGroupedLanes(const uint8_t* a, const uint8_t* b, int64_t n, int64_t block, uint8_t* out,
                           const CodeBook& book, const SearchTables& tables, uint32_t top) {
  alignas(64) float sums[kGroupValues + 64];
  const int64_t bytes = n + 4 * ((n + block - 1) / block);
  encodeGroups(n, block, out, tables, top, [&](int64_t first, int64_t m, float* absmax) {
    for (int64_t k = 0; k * block < m; ++k) {
      const int64_t begin = first + k * block, off = begin + 4 * (begin / block);
      absmax[k] = std::bit_cast<float>(
          sumBlockLanes(a + off, b + off, std::min(block, m - k * block), bytes - off, book, sums + k * block));
    }
    return GroupValues{sums, nullptr};
  });
}

}  // namespace
#endif

void DettmersCodec::encodeBlock(const float* in, int64_t n, uint8_t* out) const {
  // absmax as the integer max of |bits| (as encodeBlockLanes).
  const float absmax = std::bit_cast<float>(maxAbsBits(in, n));
  std::memcpy(out, &absmax, 4);
  uint8_t* codes = out + 4;
  const float inv = kernels::dettmersInverse(absmax);
  if (bucketBase_.empty()) {
    for (int64_t i = 0; i < n; ++i) codes[i] = nearestCode(in[i] * inv);
    return;
  }
  // The bucket shortcut of nearestCode, with the tables in locals (the uint8_t stores
  // could otherwise alias them).
  const uint8_t* base = bucketBase_.data();
  const float* mid = midpoints_.data();
  const uint32_t top = topCode();
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i] * inv;
    const uint32_t b = base[std::bit_cast<uint32_t>(v) >> 16];
    const uint32_t idx = b + (mid[b] < v ? 1u : 0u);
    codes[i] = static_cast<uint8_t>(std::min(idx, top));
  }
}

void DettmersCodec::decodeBlock(const uint8_t* in, int64_t n, float* out, bool add) const {
  float absmax;
  std::memcpy(&absmax, in, 4);
  const uint8_t* codes = in + 4;
  if (!add) {
    for (int64_t i = 0; i < n; ++i) out[i] = kernels::dettmersDecode(codes_[codes[i]], absmax);
    return;
  }
  // The products in a buffer first, so the compiler cannot fuse them with the add.
  float values[256];
  for (int64_t begin = 0; begin < n; begin += 256) {
    const int64_t m = std::min<int64_t>(256, n - begin);
    for (int64_t i = 0; i < m; ++i) values[i] = kernels::dettmersDecode(codes_[codes[begin + i]], absmax);
    for (int64_t i = 0; i < m; ++i) out[begin + i] += values[i];
  }
}

void DettmersCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext&) const {
  const int64_t block = blockLength(n);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const SearchTables tables(searchLevels_.data(), midpoints_[254]);
  if (encodesInGroups(block)) {
    encodeGroupedLanes(in, n, block, out, tables, topCode());
    return;
  }
#endif
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    encodeBlockLanes(in + begin, m, out + begin + 4 * (begin / block), tables, topCode());
#else
    encodeBlock(in + begin, m, out + begin + 4 * (begin / block));
#endif
  }
}

void DettmersCodec::decodeBlocks(const uint8_t* in, int64_t n, float* out, bool add) const {
  const int64_t block = blockLength(n);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const CodeBook book(codes_.data(), codeBytes_.data());
#endif
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    decodeBlockLanes(in + begin + 4 * (begin / block), m, out + begin, add, book);
#else
    decodeBlock(in + begin + 4 * (begin / block), m, out + begin, add);
#endif
  }
}

void DettmersCodec::decode(const uint8_t* in, int64_t n, float* out) const { decodeBlocks(in, n, out, false); }

void DettmersCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const { decodeBlocks(in, n, acc, true); }

void DettmersCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                    const EncodeContext&) const {
  // Block by block (both inputs read before the output is written: out may alias).
  const int64_t block = blockLength(n);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const CodeBook book(codes_.data(), codeBytes_.data());
  const SearchTables tables(searchLevels_.data(), midpoints_[254]);
  if (encodesInGroups(block)) {
    sumEncodeGroupedLanes(a, b, n, block, out, book, tables, topCode());
    return;
  }
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t off = begin + 4 * (begin / block);
    sumEncodeBlockLanes(a + off, b + off, std::min(block, n - begin), out + off, book, tables, topCode());
  }
#else
  std::vector<float> sum(static_cast<size_t>(std::min(block, n)));
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    const int64_t off = begin + 4 * (begin / block);
    decodeBlock(a + off, m, sum.data(), false);
    decodeBlock(b + off, m, sum.data(), true);
    encodeBlock(sum.data(), m, out + off);
  }
#endif
}

}  // namespace aps::precision
