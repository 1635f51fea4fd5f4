// Every one of the 2^32 fp32 inputs through FloatCodec's encode (its vector paths) against the
// scalar core, per format and rounding mode. Minutes of work: labelled slow, outside the
// default run (CodecVectorPathsTest.cpp sweeps a strided subset there).
#include "tests/precision/CodecVectorPathsTesting.h"

#include "framework/core/Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <string>
#include <tuple>

namespace aps::precision::testing {
namespace {

class CodecExhaustive : public ::testing::TestWithParam<std::tuple<std::string, RoundingMode>> {};

TEST_P(CodecExhaustive, EveryFloatEncodesAsTheScalarCore) {
  const FloatCodec codec(FloatFormat::preset(std::get<0>(GetParam())), std::get<1>(GetParam()));
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

INSTANTIATE_TEST_SUITE_P(Formats, CodecExhaustive,
                         ::testing::Combine(::testing::Values("fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m0"),
                                            ::testing::Values(RoundingMode::NearestEven, RoundingMode::Stochastic,
                                                              RoundingMode::TowardZero)),
                         [](const auto& param) {
                           return std::get<0>(param.param) + "_" + roundingModeName(std::get<1>(param.param));
                         });

}  // namespace
}  // namespace aps::precision::testing
