// The one-rank-at-a-time simulation gives the schedule's bits (and byte counts) exactly.
#include "comm/SimTransport.h"
#include "comm/StreamingAllReduce.h"
#include "comm/StreamingGradientReducer.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "tests/comm/TestCodecs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace aps::comm {
namespace {

std::vector<float> inputOf(int rank, int64_t n) {
  Rng rng(77 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal(0.0f, 0.5f + static_cast<float>(rank % 3));
  return v;
}

TEST(StreamingAllReduce, MatchesTheScheduleBitForBit) {
  std::vector<std::shared_ptr<const precision::Codec>> codecs{
      std::make_shared<testing::Half16Codec>(), std::make_shared<testing::Half16Codec>(true),
      precision::makeCodec("e4m3:stochastic"), precision::makeCodec("dettmers_dynamic/block256"),
      precision::makeCodec("e3m0")};
  const std::vector<AllReduceOptions> kinds{
      {.kind = AllReduceKind::TwoShot},
      {.kind = AllReduceKind::Native},
      {.kind = AllReduceKind::AllGather, .roundEveryAdd = false},
      {.kind = AllReduceKind::AllGather, .roundEveryAdd = true},
      {.kind = AllReduceKind::AllGather, .roundEveryAdd = true, .kahan = true},
  };
  const precision::EncodeContext ctx{.seed = 3, .stream = 99, .offset = 5};
  for (const auto& codec : codecs) {
    for (const AllReduceOptions& options : kinds) {
      for (int ranks : {1, 2, 5, 16}) {
        for (int64_t n : {0, 1, 7, 1000}) {
          std::vector<std::vector<float>> world;
          std::vector<float*> p;
          for (int r = 0; r < ranks; ++r) world.push_back(inputOf(r, n));
          for (auto& w : world) p.push_back(w.data());
          SimTransport sim(ranks);
          const SyncStats expected = makeAllReduce(options, codec)->run(sim, p, n, ctx);

          StreamingAllReduce streaming(options, codec, ranks);
          streaming.begin(n, ctx);
          for (int r = 0; r < ranks; ++r) streaming.add(inputOf(r, n).data());
          std::vector<float> out(static_cast<size_t>(n));
          const SyncStats got = streaming.finish(out.data());

          const std::string what = codec->name() + " " + std::string(allReduceKindName(options.kind)) +
                                   (options.kahan           ? " kahan"
                                    : options.roundEveryAdd ? ""
                                                            : " fp32") +
                                   " N=" + std::to_string(ranks) + " n=" + std::to_string(n);
          EXPECT_EQ(0, n == 0 ? 0 : std::memcmp(out.data(), world[0].data(), static_cast<size_t>(n) * 4)) << what;
          EXPECT_EQ(got.bytesSent, expected.bytesSent) << what;
          EXPECT_EQ(got.nonFinite, expected.nonFinite) << what;
        }
      }
    }
  }
}

TEST(StreamingAllReduce, FlagsNonFiniteAndRejectsMisuse) {
  auto codec = std::make_shared<testing::Half16Codec>();
  StreamingAllReduce s({.kind = AllReduceKind::TwoShot}, codec, 3);
  EXPECT_THROW(s.add(nullptr), Error) << "add before begin";
  s.begin(4);
  std::vector<float> x{1.0f, 2.0f, std::numeric_limits<float>::infinity(), 0.0f}, out(4);
  s.add(x.data());
  EXPECT_THROW(s.finish(out.data()), Error) << "finish before every rank was added";
  s.add(x.data());
  s.add(x.data());
  EXPECT_THROW(s.add(x.data()), Error) << "a fourth rank in a world of three";
  EXPECT_TRUE(s.finish(out.data()).nonFinite);
  EXPECT_THROW(StreamingAllReduce({.kind = AllReduceKind::Ring}, codec, 3), Error);
}

TEST(StreamingAllReduce, ScalesToManyRanksInLittleMemory) {
  // 1024 virtual ranks; only one rank's input exists at a time.
  auto codec = precision::makeCodec("e4m3");
  StreamingAllReduce s({.kind = AllReduceKind::TwoShot}, std::move(codec), 1024);
  const int64_t n = 1024;
  s.begin(n);
  std::vector<double> exact(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < 1024; ++r) {
    const std::vector<float> g = inputOf(r, n);
    for (size_t i = 0; i < g.size(); ++i) exact[i] += g[i];
    s.add(g.data());
  }
  std::vector<float> out(static_cast<size_t>(n));
  const SyncStats stats = s.finish(out.data());
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    err += (out[i] - exact[i]) * (out[i] - exact[i]);
    ref += exact[i] * exact[i];
  }
  // e4m3 (3 mantissa bits): input quantisation averages out, one final rounding remains.
  EXPECT_LT(std::sqrt(err / ref), 1.0 / 16);
  EXPECT_EQ(stats.bytesSent.size(), 1024u);
}

TEST(StreamingGradientReducer, MatchesTheGradientReducerOverSteps) {
  const int ranks = 5;
  const std::vector<int64_t> sizes{40, 3, 100, 0, 17, 64};
  auto codec = std::make_shared<testing::Half16Codec>(true);
  std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms{
      makeAllReduce({.kind = AllReduceKind::TwoShot}, codec),
      makeAllReduce({.kind = AllReduceKind::AllGather, .kahan = true}, codec),
      makeAllReduce({.kind = AllReduceKind::Native}, nullptr)};
  const std::vector<int> formats{0, 0, 1, 1, 2, 0};
  const ReducerOptions options{.bucketCapBytes = 256, .firstBucketCapBytes = 128, .average = true, .seed = 8};
  auto gradsOf = [&](int rank, int step) {
    std::vector<std::vector<float>> g;
    for (size_t p = 0; p < sizes.size(); ++p) g.push_back(inputOf(rank * 10 + step + static_cast<int>(p), sizes[p]));
    return g;
  };
  auto named = [&](std::vector<std::vector<float>>& g) {
    std::vector<NamedGradient> out;
    for (size_t p = 0; p < g.size(); ++p)
      out.push_back({fmt::format("w{}", p), {g[p].data(), static_cast<int64_t>(g[p].size())}});
    return out;
  };
  // Batch: every rank's gradients at once.
  std::vector<std::vector<std::vector<float>>> world;
  for (int r = 0; r < ranks; ++r) world.push_back(gradsOf(r, 0));
  std::vector<std::vector<NamedGradient>> worldNamed;
  for (auto& g : world) worldNamed.push_back(named(g));
  SimTransport sim(ranks);
  GradientReducer batch(sim, worldNamed, algorithms, formats, options);
  // Streaming: one set of gradients, refilled per virtual rank.
  std::vector<std::vector<float>> mine = gradsOf(0, 0);
  StreamingGradientReducer streaming(ranks, named(mine), algorithms, formats, options);
  ASSERT_EQ(streaming.layout().buckets().size(), batch.layout().buckets().size());

  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < ranks; ++r) {
      const auto g = gradsOf(r, step);
      for (size_t p = 0; p < g.size(); ++p) std::copy(g[p].begin(), g[p].end(), world[r][p].begin());
    }
    for (int p = static_cast<int>(sizes.size()) - 1; p >= 0; --p)
      for (int r = 0; r < ranks; ++r) batch.markReady(p, r);
    const StepCommStats expected = batch.wait();
    for (int r = 0; r < ranks; ++r) {
      const auto g = gradsOf(r, step);
      for (size_t p = 0; p < g.size(); ++p) std::copy(g[p].begin(), g[p].end(), mine[p].begin());
      streaming.addRank();
    }
    const StepCommStats got = streaming.finish();
    for (size_t p = 0; p < sizes.size(); ++p) EXPECT_EQ(mine[p], world[0][p]) << "step " << step << " param " << p;
    EXPECT_EQ(got.bytesSent, expected.bytesSent);
    EXPECT_EQ(got.nonFinite, expected.nonFinite);
  }
  EXPECT_THROW(streaming.finish(), Error) << "no rank added yet";
  EXPECT_THROW(StreamingGradientReducer(ranks, named(mine), {makeAllReduce({.kind = AllReduceKind::Ring}, codec)}),
               Error);
}

}  // namespace
}  // namespace aps::comm
