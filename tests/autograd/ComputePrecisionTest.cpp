#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/Function.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/tensor/HalfFloat.h"
#include "framework/numerics/FormatRounding.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using aps::Tensor;
namespace ag = aps::autograd;
namespace precision = aps::precision;
using ag::ComputePrecision;
using aps::precision::ComputeFormat;
using Mode = ComputePrecision::Mode;

float viaHalf(float x) { return aps::halfBitsToFloat(aps::floatToHalfBits(x)); }
float viaBf16(float x) { return aps::bfloat16BitsToFloat(aps::floatToBFloat16Bits(x)); }
uint32_t bitsOf(float x) { return std::bit_cast<uint32_t>(x); }

// out = k * x with a closure (no ops library), recorded through recordFunction.
Tensor scale(const Tensor& x, float k, ag::OpPrecision precision = ag::OpPrecision::Compute) {
  Tensor out = Tensor::empty(x.sizes());
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = k * x.data<float>()[i];
  ag::recordFunction(
      out, "Scale", {x},
      [k](const Tensor& g) {
        Tensor gi = Tensor::empty(g.sizes());
        for (int64_t i = 0; i < g.numel(); ++i) gi.data<float>()[i] = k * g.data<float>()[i];
        return std::vector<Tensor>{gi};
      },
      precision);
  return out;
}

// out = a + b, whose backward hands the very gradient it received to both inputs.
Tensor plus(const Tensor& a, const Tensor& b, ag::OpPrecision precision = ag::OpPrecision::Compute) {
  Tensor out = Tensor::empty(a.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) out.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
  ag::recordFunction(
      out, "Plus", {a, b},
      [](const Tensor& g) {
        return std::vector<Tensor>{g, g};
      },
      precision);
  return out;
}

TEST(ComputePrecision, ParsesEveryModeAndNamesBadValues) {
  for (const char* name : {"fp32", "fp16_mixed", "fp16_pure", "bf16_mixed", "bf16_pure"})
    EXPECT_STREQ(ComputePrecision::parse(name).name(), name);
  EXPECT_EQ(ComputePrecision::parse("fp16_pure").format(), ComputeFormat::Fp16);
  EXPECT_EQ(ComputePrecision::parse("bf16_mixed").format(), ComputeFormat::BFloat16);
  EXPECT_TRUE(ComputePrecision::parse("bf16_mixed").isMixed());
  EXPECT_EQ(ComputePrecision::parse("bf16_mixed").parameterFormat(), ComputeFormat::Fp32);
  EXPECT_EQ(ComputePrecision::parse("fp16_pure").parameterFormat(), ComputeFormat::Fp16);
  try {
    ComputePrecision::parse("fp8_pure");
    FAIL() << "no error";
  } catch (const aps::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_pure"), std::string::npos);
  }
}

TEST(ComputePrecision, GuardIsScopedAndNests) {
  EXPECT_TRUE(ComputePrecision::current().isFp32());
  {
    ag::ComputePrecisionGuard outer{ComputePrecision(Mode::Fp16Pure)};
    EXPECT_EQ(ComputePrecision::current().mode(), Mode::Fp16Pure);
    {
      ag::ComputePrecisionGuard inner{ComputePrecision(Mode::Bf16Mixed)};
      EXPECT_EQ(ComputePrecision::current().mode(), Mode::Bf16Mixed);
    }
    EXPECT_EQ(ComputePrecision::current().mode(), Mode::Fp16Pure);
  }
  EXPECT_TRUE(ComputePrecision::current().isFp32());
}

// The vectorised nearest-even rounding agrees bit for bit with the storage conversions of
// HalfFloat.h: on edge values and on a sweep of bit patterns over the whole float range.
TEST(FormatRounding, NearestEvenMatchesStorageConversions) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values{0.0f,        -0.0f,      1.0f,          65504.0f,     65519.99f,       65520.0f,
                            -65520.0f,   1e9f,       inf,           -inf,         0x1p-24f,        0x1p-25f,
                            0x1.8p-25f,  0x1p-26f,   0x1p-14f,      0x1.ffcp-15f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                            0x1p-149f,   3.0e38f,    3.4028235e38f, -2.5f,        0x1.0101p0f,     0x1.0081p0f,
                            0x1.0080p0f, 0x1.0180p0f};
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 2039)
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  std::vector<float> half = values, bf = values;
  precision::roundNearestEven(half.data(), static_cast<int64_t>(half.size()), ComputeFormat::Fp16);
  precision::roundNearestEven(bf.data(), static_cast<int64_t>(bf.size()), ComputeFormat::BFloat16);
  int64_t halfMismatches = 0, bfMismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(half[i]) && std::isnan(bf[i]));
      continue;
    }
    halfMismatches += bitsOf(half[i]) != bitsOf(viaHalf(x));
    bfMismatches += bitsOf(bf[i]) != bitsOf(viaBf16(x));
    if (bitsOf(half[i]) != bitsOf(viaHalf(x))) ADD_FAILURE() << "fp16 " << x << ": " << half[i] << " vs " << viaHalf(x);
    if (halfMismatches > 5) break;
  }
  EXPECT_EQ(halfMismatches, 0);
  EXPECT_EQ(bfMismatches, 0);
  EXPECT_EQ(precision::roundNearestEven(65520.0f, ComputeFormat::Fp16), inf);
  EXPECT_EQ(precision::roundNearestEven(0x1p-25f, ComputeFormat::Fp16), 0.0f);  // tie to even (zero)
  EXPECT_EQ(precision::roundNearestEven(0x1.8p-25f, ComputeFormat::Fp16), 0x1p-24f);
  EXPECT_TRUE(precision::isRepresentable(0x1p-24f, ComputeFormat::Fp16));
  EXPECT_FALSE(precision::isRepresentable(1.0f + 0x1p-11f, ComputeFormat::Fp16));
  EXPECT_FALSE(precision::isRepresentable(1.0f + 0x1p-8f, ComputeFormat::BFloat16));
}

TEST(FormatRounding, StochasticIsUnbiasedBetweenNeighboursAndReproducible) {
  for (ComputeFormat format : {ComputeFormat::Fp16, ComputeFormat::BFloat16}) {
    for (float x : {1.0f + 0x1p-13f, -3.3f, 0x1.4p-25f, 1000.1f}) {
      const int64_t n = 20000;
      std::vector<float> v(static_cast<size_t>(n), x), again = v;
      precision::roundStochastic(v.data(), n, format, 42, 7);
      precision::roundStochastic(again.data(), n, format, 42, 7);
      EXPECT_EQ(v, again);
      // The neighbours: nearest-even gives one, the other is one grid step away.
      double mean = 0.0;
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (float r : v) {
        mean += r;
        lo = std::min(lo, r);
        hi = std::max(hi, r);
        EXPECT_TRUE(precision::isRepresentable(r, format));
      }
      mean /= static_cast<double>(n);
      EXPECT_LE(lo, x);
      EXPECT_GE(hi, x);
      EXPECT_TRUE(lo == precision::roundNearestEven(x, format) || hi == precision::roundNearestEven(x, format));
      EXPECT_NEAR(mean, x, 4.0 * (hi - lo) / std::sqrt(static_cast<double>(n)) + 1e-12) << x;
    }
    // Format values stay as they are; another stream draws other bits.
    std::vector<float> exact{1.0f, -0.5f, 0.0f, 2048.0f};
    const std::vector<float> before = exact;
    precision::roundStochastic(exact.data(), 4, format, 1, 1);
    EXPECT_EQ(exact, before);
  }
  std::vector<float> a(1000, 1.0f + 0x1p-12f), b = a;
  precision::roundStochastic(a.data(), 1000, ComputeFormat::Fp16, 42, 1);
  precision::roundStochastic(b.data(), 1000, ComputeFormat::Fp16, 42, 2);
  EXPECT_NE(a, b);
  // All-ones random bits round every inexact value up: past fp16's largest finite value to inf.
  EXPECT_EQ(precision::roundStochastic(65535.0f, ComputeFormat::Fp16, 0xFFFFFFFFu),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(precision::roundStochastic(65535.0f, ComputeFormat::Fp16, 0u), 65504.0f);
}

TEST(ComputePrecision, OpOutputsAreRoundedUnderAGuardOnly) {
  const Tensor x = Tensor::fromVector({1.0f, 2.0f, -7.0f, 100.0f}, {4});
  const float k = 1.0f / 3.0f;
  EXPECT_FLOAT_EQ(scale(x, k).toFloatVector()[0], k);  // fp32: untouched
  for (Mode mode : {Mode::Fp16Mixed, Mode::Fp16Pure, Mode::Bf16Mixed, Mode::Bf16Pure}) {
    const ComputePrecision precision(mode);
    ag::ComputePrecisionGuard guard(precision);
    const Tensor y = scale(x, k);
    for (int64_t i = 0; i < 4; ++i) {
      const float exact = k * x.toFloatVector()[static_cast<size_t>(i)];
      EXPECT_EQ(y.toFloatVector()[static_cast<size_t>(i)], precision::roundNearestEven(exact, precision.format()));
      EXPECT_NE(y.toFloatVector()[static_cast<size_t>(i)], exact);
    }
    // Autocast's fp32 ops keep fp32 outputs in mixed modes only.
    const Tensor loss = scale(x, k, ag::OpPrecision::Fp32WhenMixed);
    EXPECT_EQ(precision::countNotRepresentable(loss, precision.format()) > 0, precision.isMixed());
  }
}

TEST(ComputePrecision, ViewOutputsAreNotRoundedAndLeaveTheirInputAlone) {
  ag::ComputePrecisionGuard guard{ComputePrecision(Mode::Fp16Mixed)};
  Tensor w = Tensor::fromVector({0.1f, 0.2f}, {2});
  w.setRequiresGrad();
  Tensor view = w.detach();  // shares w's storage, as a reshape does
  ag::recordFunction(view, "View", {w}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  EXPECT_EQ(w.toFloatVector()[0], 0.1f);
  EXPECT_EQ(ag::formatOf(view), ComputeFormat::Fp32);  // a view of an fp32 master
}

// Gradients are rounded to the format of the tensor they belong to: intermediate
// activations always, leaves (parameters) in pure modes only; the root gradient never.
TEST(ComputePrecision, BackwardRoundsGradientsByTheFormatOfTheirTensor) {
  const float k1 = 0.1f, k2 = 1.0f / 7.0f, seed = 1.0f / 11.0f;
  for (Mode mode : {Mode::Fp16Mixed, Mode::Fp16Pure, Mode::Bf16Mixed, Mode::Bf16Pure}) {
    const ComputePrecision precision(mode);
    const ComputeFormat f = precision.format();
    Tensor x = Tensor::fromVector({0.5f, 1.0f}, {2});
    x.setRequiresGrad();
    Tensor loss;
    {
      ag::ComputePrecisionGuard guard(precision);
      loss = scale(scale(x, k1), k2);
    }
    const Tensor root = Tensor::fromVector({seed, seed}, {2});
    ag::backward(loss, root);  // after the guard: nodes remember their formats
    EXPECT_EQ(root.toFloatVector()[0], seed);
    const float intermediate = precision::roundNearestEven(k2 * seed, f);  // gradient of scale(x, k1)
    const float expected = precision.isPure() ? precision::roundNearestEven(k1 * intermediate, f) : k1 * intermediate;
    EXPECT_EQ(x.grad().toFloatVector()[0], expected) << precision.name();
    EXPECT_NE(k1 * intermediate, precision::roundNearestEven(k1 * intermediate, f));  // the test can tell
  }
}

TEST(ComputePrecision, SharedGradientsAreCopiedBeforeRoundingForDifferentFormats) {
  // An fp32 op (its incoming gradient is fp32) hands one gradient tensor to an fp32 master
  // leaf x and to a 16-bit activation h.
  ag::ComputePrecisionGuard guard{ComputePrecision(Mode::Fp16Mixed)};
  Tensor x = Tensor::fromVector({1.0f}, {1});
  Tensor w = Tensor::fromVector({1.0f}, {1});
  x.setRequiresGrad();
  w.setRequiresGrad();
  const Tensor h = scale(w, 1.0f);
  const Tensor y = plus(x, h, ag::OpPrecision::Fp32WhenMixed);
  const float seed = 1.0f / 3.0f;
  ag::backward(y, Tensor::fromVector({seed}, {1}));
  EXPECT_EQ(x.grad().toFloatVector()[0], seed);                                                    // fp32 leaf
  EXPECT_EQ(w.grad().toFloatVector()[0], precision::roundNearestEven(seed, ComputeFormat::Fp16));  // via h
}

TEST(ComputePrecision, PureLeafGradientsStayFormatValuesAcrossAccumulation) {
  const ComputePrecision precision(Mode::Bf16Pure);
  Tensor x = Tensor::fromVector({1.0f, 2.0f}, {2});
  x.setRequiresGrad();
  x.setGrad(Tensor::fromVector({1.0f, 1.0f}, {2}));
  Tensor y;
  {
    ag::ComputePrecisionGuard guard(precision);
    y = scale(x, 1.0f);
  }
  ag::backward(y, Tensor::fromVector({0x1p-9f, 0x1p-9f}, {2}));
  EXPECT_EQ(precision::countNotRepresentable(x.grad(), ComputeFormat::BFloat16), 0);
  EXPECT_EQ(x.grad().toFloatVector()[0], 1.0f);  // 1 + 2^-9 rounds back to 1 in bf16
}

}  // namespace
