#include "precision/DettmersCodec.h"

#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace aps::precision {
namespace {

TEST(DettmersCodec, DynamicTreeCodeBookHas256SortedValues) {
  const auto book = DettmersCodec::dynamicTreeCodeBook();
  EXPECT_TRUE(std::is_sorted(book.begin(), book.end()));
  EXPECT_EQ(std::adjacent_find(book.begin(), book.end()), book.end());
  EXPECT_EQ(book[255], 1.0f);
  EXPECT_NE(std::find(book.begin(), book.end(), 0.0f), book.end());
  EXPECT_FLOAT_EQ(book[0], -0.99296875f);  // -(midpoint of the last of 65 linspace(0.1, 1) points)
  // The smallest positive code: 10^-6 * (0.1 + 1) / 2.
  const auto positive = std::upper_bound(book.begin(), book.end(), 0.0f);
  EXPECT_FLOAT_EQ(*positive, 0.55e-6f);
}

TEST(DettmersCodec, NearestCodeByBinarySearch) {
  const DettmersCodec codec(DettmersCodec::Type::DynamicTree, 0);
  const auto& book = codec.codeBook();
  Rng rng(3);
  for (int t = 0; t < 20000; ++t) {
    const float v = rng.uniform() * 2.0f - 1.0f;
    const int c = codec.nearestCode(v);
    float best = 1e9f;
    for (float code : book) best = std::min(best, std::fabs(code - v));
    ASSERT_EQ(std::fabs(book[c] - v), best) << v;
  }
  // The encoder's inlined search gives the same codes (absmax 1: values are not rescaled).
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear}) {
    const DettmersCodec c(type, 0);
    std::vector<float> x(5000);
    for (auto& v : x) v = std::ldexp(rng.uniform() * 2.0f - 1.0f, -static_cast<int>(rng.below(12)));
    x[0] = 1.0f;
    std::vector<uint8_t> bytes(c.encodedBytes(5000));
    c.encode(x.data(), 5000, bytes.data());
    for (size_t i = 0; i < x.size(); ++i) {
      float best = 1e9f;
      for (float code : c.codeBook()) best = std::min(best, std::fabs(code - x[i]));
      ASSERT_EQ(std::fabs(c.codeBook()[bytes[4 + i]] - x[i]), best) << x[i];
    }
  }
}

// Mean relative error |x - Q(x)| / |x| on U(0, 1) data, absmax per tensor (Dettmers 2016, Table 2).
double meanRelativeError(const Codec& codec, int64_t n) {
  Rng rng(17);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = 1.0f - rng.uniform();  // (0, 1]
  std::vector<uint8_t> bytes(codec.encodedBytes(n));
  codec.encode(x.data(), n, bytes.data());
  std::vector<float> y(x.size());
  codec.decode(bytes.data(), n, y.data());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += std::fabs(x[i] - y[i]) / x[i];
  return sum / static_cast<double>(n);
}

TEST(DettmersCodec, MeanRelativeErrorOnUniformDataIsNearThePapers) {
  // Paper (Table 2): dynamic tree 1.39%, linear 2.16%. The paper does not say how the
  // figure was computed (sample, normalisation), so we assert the same magnitude and
  // the ordering: within a factor 1.6 of the paper's figure, and dynamic < linear. A
  // broken code book or search moves the error by far more than that (e.g. 10x).
  const int64_t n = 1 << 20;
  const double dynamic = meanRelativeError(DettmersCodec(DettmersCodec::Type::DynamicTree, 0), n);
  const double linear = meanRelativeError(DettmersCodec(DettmersCodec::Type::Linear, 0), n);
  RecordProperty("dynamic_mre", std::to_string(dynamic));
  RecordProperty("linear_mre", std::to_string(linear));
  std::printf("mean relative error on U(0,1): dynamic %.4f%%, linear %.4f%%\n", 100 * dynamic, 100 * linear);
  EXPECT_GT(dynamic, 0.0139 / 1.6);
  EXPECT_LT(dynamic, 0.0139 * 1.6);
  EXPECT_GT(linear, 0.0216 / 1.6);
  EXPECT_LT(linear, 0.0216 * 1.6);
  EXPECT_LT(dynamic, linear);
}

TEST(DettmersCodec, BlocksCarryTheirOwnScale) {
  const auto codec = makeCodec("dettmers_dynamic/block4");
  const std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.0f, 100.0f, 50.0f, -100.0f, 1.0f, 3.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_EQ(codec->encodedBytes(n), x.size() + 3 * 4);
  std::vector<uint8_t> bytes(codec->encodedBytes(n));
  codec->encode(x.data(), n, bytes.data());
  float scale;
  std::memcpy(&scale, bytes.data() + 8, 4);
  EXPECT_EQ(scale, 100.0f);
  std::vector<float> y(x.size());
  codec->decode(bytes.data(), n, y.data());
  // The coarsest gap of the dynamic tree is 0.9 / 64 of the block's absmax (in (0.1, 1)).
  const float absmax[] = {1.0f, 100.0f, 3.0f};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 0.0071f * absmax[i / 4]) << i;
  // The last block decodes on its own.
  float last;
  codec->decode(bytes.data() + 2 * (4 + 4), 1, &last);
  EXPECT_EQ(last, 3.0f);
  // Per-tensor: one scale for the whole chunk.
  EXPECT_EQ(makeCodec("dettmers_linear")->encodedBytes(n), x.size() + 4);
  std::vector<float> zeros(8, 0.0f), back(8, 1.0f);
  std::vector<uint8_t> zb(makeCodec("dettmers_linear")->encodedBytes(8));
  makeCodec("dettmers_linear")->encode(zeros.data(), 8, zb.data());
  makeCodec("dettmers_linear")->decode(zb.data(), 8, back.data());
  EXPECT_EQ(back, zeros);
}

TEST(DettmersCodec, DecodeAddEncodeMatchesTwoSteps) {
  const auto codec = makeCodec("dettmers_dynamic/block256");
  const int64_t n = 1000;
  Rng rng(5);
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = rng.normal();
  for (auto& v : y) v = rng.normal();
  std::vector<uint8_t> a(codec->encodedBytes(n)), b(a.size()), fused(a.size()), twoStep(a.size());
  codec->encode(x.data(), n, a.data());
  codec->encode(y.data(), n, b.data());
  codec->decodeAddEncode(a.data(), b.data(), n, fused.data());
  std::vector<float> sum(n, 0.0f);
  codec->decodeAdd(a.data(), n, sum.data());
  codec->decodeAdd(b.data(), n, sum.data());
  codec->encode(sum.data(), n, twoStep.data());
  EXPECT_EQ(fused, twoStep);
}

}  // namespace
}  // namespace aps::precision
