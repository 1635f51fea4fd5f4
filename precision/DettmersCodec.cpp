#include "precision/DettmersCodec.h"

#include "framework/core/Error.h"
#include "precision/kernels/Dettmers.h"
#include "precision/kernels/Scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace aps::precision {

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
  values.push_back(0.0);
  values.push_back(1.0);
  std::sort(values.begin(), values.end());
  APS_ASSERT(values.size() == 256);
  std::array<float, 256> book{};
  for (size_t i = 0; i < 256; ++i) book[i] = static_cast<float>(values[i]);
  return book;
}

std::array<float, 256> DettmersCodec::linearCodeBook() {
  std::array<float, 256> book{};
  for (int c = 0; c < 255; ++c) book[c] = static_cast<float>((c - 127) / 127.0);
  book[255] = 1.0f;  // unused duplicate of the largest code, keeps the table sorted
  return book;
}

DettmersCodec::DettmersCodec(Type type, int64_t blockSize) : type_(type), blockSize_(blockSize) {
  APS_CHECK(blockSize >= 0, "dettmers codec: block_size = {} must be >= 0", blockSize);
  codes_ = type == Type::DynamicTree ? dynamicTreeCodeBook() : linearCodeBook();
  for (int k = 0; k < 255; ++k) midpoints_[k] = 0.5f * (codes_[k] + codes_[k + 1]);
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
}

std::string DettmersCodec::name() const {
  std::string n = type_ == Type::DynamicTree ? "dettmers_dynamic" : "dettmers_linear";
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

void DettmersCodec::encodeBlock(const float* in, int64_t n, uint8_t* out) const {
  // absmax as the integer max of |bits| (vectorises; NaN > inf > finite in this order, so
  // a non-finite value makes the scale non-finite, the block decodes non-finite and the
  // overflow stays visible to the receiver).
  uint32_t maxBits = 0;
  for (int64_t i = 0; i < n; ++i) maxBits = std::max(maxBits, kernels::absBits(in[i]));
  const float absmax = std::bit_cast<float>(maxBits);
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

void DettmersCodec::decodeBlock(const uint8_t* in, int64_t n, float* out) const {
  float absmax;
  std::memcpy(&absmax, in, 4);
  const uint8_t* codes = in + 4;
  for (int64_t i = 0; i < n; ++i) out[i] = kernels::dettmersDecode(codes_[codes[i]], absmax);
}

void DettmersCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext&) const {
  const int64_t block = blockLength(n);
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    encodeBlock(in + begin, m, out + begin + 4 * (begin / block));
  }
}

void DettmersCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t block = blockLength(n);
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    decodeBlock(in + begin + 4 * (begin / block), m, out + begin);
  }
}

void DettmersCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  const int64_t block = blockLength(n);
  std::vector<float> values(static_cast<size_t>(std::min(block, n)));
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    decodeBlock(in + begin + 4 * (begin / block), m, values.data());
    for (int64_t i = 0; i < m; ++i) acc[begin + i] += values[i];
  }
}

void DettmersCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                    const EncodeContext&) const {
  // Block by block (both inputs read before the output is written: out may alias).
  const int64_t block = blockLength(n);
  std::vector<float> va(static_cast<size_t>(std::min(block, n)));
  std::vector<float> vb(va.size());
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    const int64_t off = begin + 4 * (begin / block);
    decodeBlock(a + off, m, va.data());
    decodeBlock(b + off, m, vb.data());
    for (int64_t i = 0; i < m; ++i) va[i] += vb[i];
    encodeBlock(va.data(), m, out + off);
  }
}

}  // namespace aps::precision
