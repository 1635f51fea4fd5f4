// The CUDA codecs against the CPU codecs: for every codec kind and rounding mode, the device's
// wire bytes equal the CPU's, and decode, decodeAdd and decodeAddEncode give the same values
// (NaN matching any NaN in fp32 outputs: arithmetic on NaN keeps a payload on x86 and gives
// the canonical NaN on CUDA; wire bytes never carry a payload, every encode maps NaN to one code).
#include "framework/core/Rng.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/ApsScaler.h"
#include "precision/CodecSpec.h"
#include "precision/cuda/DeviceCodec.h"
#include "precision/kernels/Scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace aps::precision {
namespace {

// A device buffer of bytes (through aps's runtime, so the emulated device serves it too),
// freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) : ptr(aps::cuda::rawMalloc(bytes < 1 ? 1 : bytes, 0)) {}
  ~DeviceBuffer() { aps::cuda::rawFree(ptr, 0); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

template <typename T>
void upload(const DeviceBuffer& d, const std::vector<T>& h) {
  ASSERT_NE(d.ptr, nullptr);
  aps::cuda::copySync(d.ptr, h.data(), h.size() * sizeof(T), aps::cuda::CopyKind::HostToDevice);
}

template <typename T>
std::vector<T> download(const DeviceBuffer& d, size_t count) {
  std::vector<T> h(count);
  aps::cuda::synchronize(0);
  aps::cuda::copySync(h.data(), d.ptr, count * sizeof(T), aps::cuda::CopyKind::DeviceToHost);
  return h;
}

// Random values of many magnitudes with zeros, subnormals, inf, NaN and the largest values
// of fp32 and the small formats mixed in (some blocks end up non-finite, most do not).
std::vector<float> inputs(int64_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = rng.normal(0.0f, scale) * std::ldexp(1.0f, static_cast<int>(rng.below(16)) - 8);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x007fffffu),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            448.0f,
                            -57344.0f,
                            65504.0f,
                            65520.0f,
                            6.0f,
                            1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7f800001u)};
  // Specials in the first 300 values only, so later blocks stay finite; a stretch of zeros.
  const auto head = static_cast<uint64_t>(std::min<int64_t>(n, 300));
  for (int i = 0; i < 300; ++i) x[static_cast<size_t>(rng.below(head))] = specials[rng.below(std::size(specials))];
  for (int64_t i = 600; i < 700 && i < n; ++i) x[static_cast<size_t>(i)] = 0.0f;
  for (int64_t i = 700; i < 760 && i < n; ++i)
    x[static_cast<size_t>(i)] = std::bit_cast<float>(rng.nextU32() & 0x807fffffu);
  return x;
}

// Bit for bit, NaNs included: the device computes a NaN's sign and payload as x86 does
// (aps::nanAsX86).
bool sameValue(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

std::vector<std::string> codecNames() {
  std::vector<std::string> names;
  for (const char* f : {"fp32", "fp16", "bf16", "e5m2", "e4m3", "e4m3_ieee", "e3m0", "e3m2", "e2m3", "e2m1"}) {
    for (const char* mode : {"", ":stochastic", ":toward_zero"}) names.push_back(std::string(f) + mode);
  }
  for (const char* mx : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"}) {
    names.push_back(mx);
    names.push_back(std::string(mx) + ":stochastic");
  }
  for (const char* b : {"e3m0/block32", "e2m1:stochastic/block16", "e4m3:toward_zero/block7", "fp16/block64",
                        "bf16:stochastic/block33", "e5m2/block1000"}) {
    names.push_back(b);
  }
  for (const char* d : {"dettmers_dynamic", "dettmers_linear", "dettmers_static", "dettmers_dynamic/block256",
                        "dettmers_linear/block100", "dettmers_static/block64", "dettmers_dynamic/block7"}) {
    names.push_back(d);
  }
  return names;
}

class CodecDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecDevice, ParametersAndSizesAreTheCpuCodecs) {
  // Host side only (runs without a device): the device codec of every name, and its sizes.
  const auto cpu = makeCodec(GetParam());
  const cuda::DeviceCodec dev(*cpu);
  EXPECT_EQ(dev.name(), cpu->name());
  for (int64_t n : {0, 1, 2, 7, 31, 32, 33, 255, 256, 257, 4099})
    EXPECT_EQ(dev.encodedBytes(n), cpu->encodedBytes(n)) << n;
}

TEST_P(CodecDevice, BytesAndValuesEqualTheCpuCodec) {
  const auto cpu = makeCodec(GetParam());
  const cuda::DeviceCodec dev(*cpu);
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{4099}, int64_t{70001}}) {
    SCOPED_TRACE(GetParam() + " n=" + std::to_string(n));
    const std::vector<float> x = inputs(n, 1 + static_cast<uint64_t>(n), 3.0f);
    std::vector<float> y = inputs(n, 2 + static_cast<uint64_t>(n), 0.5f);
    const size_t bytes = cpu->encodedBytes(n);
    ASSERT_EQ(dev.encodedBytes(n), bytes);
    const EncodeContext ctx{7, 9, 123};

    // encode
    std::vector<uint8_t> ex(bytes), ey(bytes);
    cpu->encode(x.data(), n, ex.data(), ctx);
    // Where x's wire value is NaN, y is finite: a sum of two NaNs keeps the one the CPU
    // compiler's operand order picks (aps::nanAsX86), which no device can be held to.
    std::vector<float> wx(static_cast<size_t>(n));
    cpu->decode(ex.data(), n, wx.data());
    for (size_t i = 0; i < wx.size(); ++i) y[i] = std::isnan(wx[i]) ? 1.0f : y[i];
    cpu->encode(y.data(), n, ey.data(), ctx);
    DeviceBuffer dx(static_cast<size_t>(n) * 4), dy(static_cast<size_t>(n) * 4), dex(bytes), dey(bytes);
    upload(dx, x);
    upload(dy, y);
    dev.encode(dx.as<float>(), n, dex.as<uint8_t>(), ctx);
    dev.encode(dy.as<float>(), n, dey.as<uint8_t>(), ctx);
    ASSERT_EQ(download<uint8_t>(dex, bytes), ex);
    ASSERT_EQ(download<uint8_t>(dey, bytes), ey);

    // decode, of the encoded bytes and of random bytes (every code, NaN codes too)
    Rng rng(static_cast<uint64_t>(n));
    std::vector<uint8_t> noise(bytes);
    for (auto& b : noise) b = static_cast<uint8_t>(rng.nextU32());
    for (const auto* wire : {&ex, &noise}) {
      std::vector<float> expected(static_cast<size_t>(n));
      cpu->decode(wire->data(), n, expected.data());
      DeviceBuffer din(bytes), dout(static_cast<size_t>(n) * 4);
      upload(din, *wire);
      dev.decode(din.as<uint8_t>(), n, dout.as<float>());
      const auto got = download<float>(dout, static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(sameValue(got[static_cast<size_t>(i)], expected[static_cast<size_t>(i)])) << "decode " << i;
      }
    }

    // decodeAdd onto y
    std::vector<float> acc = y;
    cpu->decodeAdd(ex.data(), n, acc.data());
    DeviceBuffer dacc(static_cast<size_t>(n) * 4);
    upload(dacc, y);
    dev.decodeAdd(dex.as<uint8_t>(), n, dacc.as<float>());
    const auto gotAcc = download<float>(dacc, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(sameValue(gotAcc[static_cast<size_t>(i)], acc[static_cast<size_t>(i)])) << "decodeAdd " << i;
    }

    // decodeAddEncode, into a separate buffer and in place over a
    std::vector<uint8_t> sum(bytes);
    const EncodeContext hop{7, 10, 5};
    cpu->decodeAddEncode(ex.data(), ey.data(), n, sum.data(), hop);
    DeviceBuffer dsum(bytes);
    dev.decodeAddEncode(dex.as<uint8_t>(), dey.as<uint8_t>(), n, dsum.as<uint8_t>(), hop);
    ASSERT_EQ(download<uint8_t>(dsum, bytes), sum);
    dev.decodeAddEncode(dex.as<uint8_t>(), dey.as<uint8_t>(), n, dex.as<uint8_t>(), hop);
    ASSERT_EQ(download<uint8_t>(dex, bytes), sum);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryWireCodec, CodecDevice, ::testing::ValuesIn(codecNames()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string s = param.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

TEST(CodecDevice, AbsMaxGivesApsScalersExponents) {
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const ApsScaler scaler(FloatFormat::preset("e4m3"), 8, ScalingMode::Aps);
  DeviceBuffer out(4);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5000}, int64_t{1} << 20}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      std::vector<float> x = inputs(std::max<int64_t>(n, 1), seed, 1e-3f);
      if (seed == 1) {  // finite only
        for (auto& v : x) v = std::isfinite(v) ? v : 1.0f;
      }
      if (seed == 3) std::fill(x.begin(), x.end(), -0.0f);
      DeviceBuffer dx(x.size() * 4);
      upload(dx, x);
      cuda::absMaxBits(dx.as<float>(), n, out.as<uint32_t>(), nullptr);
      const uint32_t got = download<uint32_t>(out, 1)[0];
      uint32_t expected = 0;
      for (int64_t i = 0; i < n; ++i) expected = std::max(expected, kernels::absBits(x[static_cast<size_t>(i)]));
      ASSERT_EQ(got, expected) << n << " " << seed;
      const float e = scaler.localExponents({LayerGradient{x.data(), n}})[0];
      ASSERT_EQ(std::bit_cast<uint32_t>(kernels::apsExponent(got, scaler.worldSize())), std::bit_cast<uint32_t>(e));
    }
  }
}

}  // namespace
}  // namespace aps::precision
