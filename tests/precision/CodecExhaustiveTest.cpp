// Every one of the 2^32 fp32 inputs through FloatCodec's encode (its vector paths) against the
// scalar core, per format and rounding mode. Minutes of work: labelled slow, outside the
// default run (CodecVectorPathsTest.cpp sweeps a strided subset there).
#include "tests/precision/CodecVectorPathsTesting.h"

#include "framework/core/Parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>
#include <tuple>

namespace aps::precision::testing {
namespace {

class CodecExhaustive : public ::testing::TestWithParam<std::tuple<std::string, RoundingMode>> {};

// A preset, or "<preset>_saturate" for its saturating variant.
FloatFormat formatNamed(const std::string& name) {
  const auto cut = name.find("_saturate");
  if (cut == std::string::npos) return FloatFormat::preset(name);
  return FloatFormat::fromMap({{"preset", name.substr(0, cut)}, {"overflow", "saturate"}});
}

TEST_P(CodecExhaustive, EveryFloatEncodesAsTheScalarCore) {
  const FloatCodec codec(formatNamed(std::get<0>(GetParam())), std::get<1>(GetParam()));
  constexpr int64_t kChunk = int64_t{1} << 20;
  constexpr int64_t kChunks = (int64_t{1} << 32) / kChunk;
  std::atomic<int64_t> firstBad{-1};
  parallelFor(kChunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> xs(static_cast<size_t>(kChunk));
    for (int64_t chunk = begin; chunk < end && firstBad.load() < 0; ++chunk) {
      for (int64_t i = 0; i < kChunk; ++i) {
        xs[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(chunk * kChunk + i));
      }
      // Counters straddle 2^32 in the middle of the sweep.
      const EncodeContext ctx{31, 32, chunk * kChunk + (int64_t{1} << 31)};
      const int64_t bad = firstEncodeMismatch(codec, xs.data(), kChunk, ctx);
      if (bad >= 0) firstBad.store(chunk * kChunk + bad);
    }
  });
  EXPECT_EQ(firstBad.load(), -1) << codec.name() << ": first mismatch at x bits 0x" << std::hex << firstBad.load();
}

TEST_P(CodecExhaustive, EveryFloatRoundTripsAsEncodeThenDecode) {
  const FloatCodec codec(formatNamed(std::get<0>(GetParam())), std::get<1>(GetParam()));
  if (!codec.roundTripsInRegisters()) GTEST_SKIP() << codec.name() << " round-trips through its codes";
  constexpr int64_t kChunk = int64_t{1} << 20;
  constexpr int64_t kChunks = (int64_t{1} << 32) / kChunk;
  std::atomic<int64_t> firstBad{-1};
  parallelFor(kChunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> xs(static_cast<size_t>(kChunk)), acc(static_cast<size_t>(kChunk));
    for (int64_t chunk = begin; chunk < end && firstBad.load() < 0; ++chunk) {
      for (int64_t i = 0; i < kChunk; ++i) {
        xs[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(chunk * kChunk + i));
        acc[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
      }
      for (bool add : {false, true}) {
        const int64_t bad = firstRoundTripMismatch(codec, xs.data(), kChunk, acc.data(), add, {});
        if (bad >= 0) firstBad.store(chunk * kChunk + bad);
      }
    }
  });
  EXPECT_EQ(firstBad.load(), -1) << codec.name() << ": first mismatch at x bits 0x" << std::hex << firstBad.load();
}

INSTANTIATE_TEST_SUITE_P(Formats, CodecExhaustive,
                         ::testing::Combine(::testing::Values("fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m0",
                                                              "fp16_saturate", "bf16_saturate"),
                                            ::testing::Values(RoundingMode::NearestEven, RoundingMode::Stochastic,
                                                              RoundingMode::TowardZero)),
                         [](const auto& param) {
                           return std::get<0>(param.param) + "_" + roundingModeName(std::get<1>(param.param));
                         });

// Dettmers' codes of every fp32 input: blocks holding 1.0 and then consecutive bit patterns, so
// every value of magnitude <= 1 is searched as itself (the scale is 1) and the others set their
// block's scale, against the shared kernels. Blocks of 192 run the vector encode's whole steps
// (128 values, then exactly 64); blocks of 600 whole steps and a masked last step of eight
// vectors; blocks of 100 are encoded in groups (ten blocks' values searched as one run, each
// lane scaled by its own block's inverse).
class DettmersExhaustive : public ::testing::TestWithParam<std::tuple<DettmersCodec::Type, int64_t>> {};

TEST_P(DettmersExhaustive, EveryFloatEncodesAsTheSharedKernels) {
  const int64_t block = std::get<1>(GetParam());
  const DettmersCodec codec(std::get<0>(GetParam()), block);
  const int64_t perChunk = (block - 1) * (int64_t{1} << 12);
  const int64_t chunks = ((int64_t{1} << 32) + perChunk - 1) / perChunk;
  std::atomic<int64_t> firstBad{-1};
  parallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> xs;
    std::vector<uint8_t> got;
    for (int64_t chunk = begin; chunk < end && firstBad.load() < 0; ++chunk) {
      xs.clear();
      for (int64_t p = chunk * perChunk; p < std::min((chunk + 1) * perChunk, int64_t{1} << 32); ++p) {
        if (static_cast<int64_t>(xs.size()) % block == 0) xs.push_back(1.0f);
        xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(p)));
      }
      const auto n = static_cast<int64_t>(xs.size());
      const std::vector<uint8_t> expected = dettmersWire(codec, xs.data(), n);
      got.assign(expected.size(), 0);
      codec.encode(xs.data(), n, got.data());
      if (got != expected) firstBad.store(chunk);
    }
  });
  EXPECT_EQ(firstBad.load(), -1) << codec.name() << ": first mismatch in chunk " << firstBad.load();
}

INSTANTIATE_TEST_SUITE_P(Types, DettmersExhaustive,
                         ::testing::Combine(::testing::Values(DettmersCodec::Type::DynamicTree,
                                                              DettmersCodec::Type::Linear,
                                                              DettmersCodec::Type::StaticTree),
                                            ::testing::Values(int64_t{192}, int64_t{600}, int64_t{100})),
                         [](const auto& param) {
                           // "dettmers_dynamic" -> "dynamic"
                           return std::string(DettmersCodec::typeName(std::get<0>(param.param)) + 9) + "_block" +
                                  std::to_string(std::get<1>(param.param));
                         });

}  // namespace
}  // namespace aps::precision::testing
