// The all-reduce schedules on simulated ranks, against an fp64 exact sum.
#include "comm/AllReduceAlgorithm.h"
#include "comm/SimTransport.h"
#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "tests/comm/TestCodecs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace aps::comm {
namespace {

using testing::Half16Codec;

struct World {
  std::vector<std::vector<float>> data;  // [rank][i]
  std::vector<double> exact;             // fp64 sum of the inputs
  std::vector<double> absSum;            // sum over ranks of |x|

  std::vector<float*> pointers() {
    std::vector<float*> p;
    for (auto& d : data) p.push_back(d.data());
    return p;
  }
};

World makeWorld(int ranks, int64_t n, uint64_t seed = 7) {
  World w;
  w.exact.assign(static_cast<size_t>(n), 0.0);
  w.absSum.assign(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < ranks; ++r) {
    Rng rng(seed * 1000 + static_cast<uint64_t>(r));
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = rng.normal();
    for (size_t i = 0; i < v.size(); ++i) {
      w.exact[i] += v[i];
      w.absSum[i] += std::fabs(v[i]);
    }
    w.data.push_back(std::move(v));
  }
  return w;
}

// max_i |result_i - exact_i| / absSum_i: the error in units of the condition of the sum.
double relativeError(const World& w) {
  double worst = 0.0;
  for (size_t i = 0; i < w.exact.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(w.data[0][i]) - w.exact[i]) / w.absSum[i]);
  }
  return worst;
}

// rms(result - exact) / rms(exact): the typical error relative to the typical sum.
double rmsRelativeError(const World& w) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < w.exact.size(); ++i) {
    const double d = static_cast<double>(w.data[0][i]) - w.exact[i];
    err += d * d;
    ref += w.exact[i] * w.exact[i];
  }
  return std::sqrt(err / ref);
}

void expectIdenticalOnAllRanks(const World& w) {
  for (size_t r = 1; r < w.data.size(); ++r) {
    // memcmp of empty buffers would pass null pointers (undefined behaviour, UBSan)
    ASSERT_EQ(0,
              w.data[0].empty() ? 0 : std::memcmp(w.data[0].data(), w.data[r].data(), w.data[0].size() * sizeof(float)))
        << "rank " << r << " differs from rank 0";
  }
}

SyncStats reduceSim(World& w, AllReduceOptions options, std::shared_ptr<const precision::Codec> codec, int64_t n,
                    precision::EncodeContext ctx = {}) {
  SimTransport sim(static_cast<int>(w.data.size()));
  auto algorithm = makeAllReduce(options, std::move(codec));
  auto p = w.pointers();
  return algorithm->run(sim, p, n, ctx);
}

const auto kHalf = std::make_shared<Half16Codec>();
constexpr double kFp32Roundoff = 1.0 / (1 << 24);
constexpr double kU16 = Half16Codec::kUnitRoundoff;

TEST(AllReduceSim, NativeIsAnFp32SumInRankOrder) {
  for (int ranks : {1, 2, 3, 8}) {
    World w = makeWorld(ranks, 1001);
    auto expected = w.data[0];
    for (int r = 1; r < ranks; ++r)
      for (size_t i = 0; i < expected.size(); ++i) expected[i] += w.data[static_cast<size_t>(r)][i];
    const SyncStats stats = reduceSim(w, {.kind = AllReduceKind::Native}, nullptr, 1001);
    expectIdenticalOnAllRanks(w);
    EXPECT_EQ(0, std::memcmp(expected.data(), w.data[0].data(), expected.size() * 4)) << ranks << " ranks";
    EXPECT_LE(relativeError(w), (ranks - 1) * kFp32Roundoff);
    EXPECT_FALSE(stats.nonFinite);
    ASSERT_EQ(stats.bytesSent.size(), static_cast<size_t>(ranks));
  }
}

TEST(AllReduceSim, TwoShotErrorIsOneRoundingIndependentOfRankCount) {
  for (int ranks : {1, 2, 5, 16, 64}) {
    World w = makeWorld(ranks, 777);
    reduceSim(w, {.kind = AllReduceKind::TwoShot}, kHalf, 777);
    expectIdenticalOnAllRanks(w);
    // Per-input quantisation (u |x_k| each) plus one rounding of the sum (u |S| <= u sum|x|)
    // plus the fp32 sum.
    EXPECT_LE(relativeError(w), 2 * kU16 + ranks * kFp32Roundoff) << ranks << " ranks";
  }
}

TEST(AllReduceSim, RingErrorGrowsWithRankCount) {
  double errorAt2 = 0.0, errorAt64 = 0.0;
  for (int ranks : {2, 5, 16, 64}) {
    World w = makeWorld(ranks, 2048);
    reduceSim(w, {.kind = AllReduceKind::Ring}, kHalf, 2048);
    expectIdenticalOnAllRanks(w);
    const double err = relativeError(w);
    // One input quantisation and up to N-1 roundings of partial sums each at most sum|x|.
    EXPECT_LE(err, ranks * kU16) << ranks << " ranks";
    // Partial sums grow like sqrt(k) and each hop rounds one, so the typical error relative
    // to the sum grows like sqrt(N).
    if (ranks == 2) errorAt2 = rmsRelativeError(w);
    if (ranks == 64) errorAt64 = rmsRelativeError(w);
  }
  EXPECT_GT(errorAt64, 2 * errorAt2);
  // And it is worse than two_shot at scale, the reason two_shot is the default.
  World ring = makeWorld(64, 2048), twoShot = makeWorld(64, 2048);
  reduceSim(ring, {.kind = AllReduceKind::Ring}, kHalf, 2048);
  reduceSim(twoShot, {.kind = AllReduceKind::TwoShot}, kHalf, 2048);
  EXPECT_GT(rmsRelativeError(ring), 2 * rmsRelativeError(twoShot));
}

TEST(AllReduceSim, AllGatherSemantics) {
  const int ranks = 16;
  World fp32 = makeWorld(ranks, 999), rounded = makeWorld(ranks, 999), kahan = makeWorld(ranks, 999);
  reduceSim(fp32, {.kind = AllReduceKind::AllGather, .roundEveryAdd = false}, kHalf, 999);
  reduceSim(rounded, {.kind = AllReduceKind::AllGather, .roundEveryAdd = true}, kHalf, 999);
  reduceSim(kahan, {.kind = AllReduceKind::AllGather, .roundEveryAdd = true, .kahan = true}, kHalf, 999);
  for (World* w : {&fp32, &rounded, &kahan}) expectIdenticalOnAllRanks(*w);
  EXPECT_LE(relativeError(fp32), kU16 + ranks * kFp32Roundoff);
  EXPECT_LE(relativeError(rounded), ranks * kU16);
  EXPECT_LE(relativeError(kahan), ranks * kU16);
  EXPECT_GT(rmsRelativeError(rounded), rmsRelativeError(fp32));

  // Rounding after every add is exactly a left fold of decodeAddEncode in rank order.
  World again = makeWorld(ranks, 999);
  std::vector<std::vector<uint8_t>> enc(ranks, std::vector<uint8_t>(999 * 2));
  for (int r = 0; r < ranks; ++r) kHalf->encode(again.data[r].data(), 999, enc[r].data());
  for (int r = 1; r < ranks; ++r) kHalf->decodeAddEncode(enc[0].data(), enc[r].data(), 999, enc[0].data());
  std::vector<float> expected(999);
  kHalf->decode(enc[0].data(), 999, expected.data());
  EXPECT_EQ(0, std::memcmp(expected.data(), rounded.data[0].data(), 999 * 4));
}

TEST(AllReduceSim, KahanBeatsPlainRoundingOnAverage) {
  const int ranks = 64;
  const int64_t n = 4096;
  World rounded = makeWorld(ranks, n), kahan = makeWorld(ranks, n);
  reduceSim(rounded, {.kind = AllReduceKind::AllGather, .roundEveryAdd = true}, kHalf, n);
  reduceSim(kahan, {.kind = AllReduceKind::AllGather, .roundEveryAdd = true, .kahan = true}, kHalf, n);
  double eRounded = 0.0, eKahan = 0.0;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    eRounded += std::fabs(rounded.data[0][i] - rounded.exact[i]);
    eKahan += std::fabs(kahan.data[0][i] - kahan.exact[i]);
  }
  EXPECT_LT(eKahan, eRounded);
}

TEST(AllReduceSim, UnevenEmptyAndTinySizes) {
  for (AllReduceKind kind :
       {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather, AllReduceKind::Native}) {
    for (int ranks : {1, 3, 4, 7}) {
      for (int64_t n : {0, 1, 2, 3, 5, 6, 7, 13, 100}) {
        World w = makeWorld(ranks, n);
        const SyncStats stats = reduceSim(w, {.kind = kind, .roundEveryAdd = false}, kHalf, n);
        expectIdenticalOnAllRanks(w);
        if (n > 0) {
          EXPECT_LE(relativeError(w), ranks * kU16 + 1e-6) << allReduceKindName(kind) << " n=" << n;
        }
        EXPECT_FALSE(stats.nonFinite);
        if (n == 0 && kind != AllReduceKind::Native) {
          EXPECT_EQ(stats.maxBytesSent(), ranks > 1 ? static_cast<uint64_t>(ranks - 1) : 0u)
              << "only the finite flag travels";
        }
      }
    }
  }
}

TEST(AllReduceSim, AllZeroBuffersStayZero) {
  for (AllReduceKind kind : {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather}) {
    std::vector<std::vector<float>> data(5, std::vector<float>(37, 0.0f));
    std::vector<float*> p;
    for (auto& d : data) p.push_back(d.data());
    SimTransport sim(5);
    makeAllReduce({.kind = kind, .kahan = true}, kHalf)->run(sim, p, 37);
    for (auto& d : data)
      for (float x : d) EXPECT_EQ(x, 0.0f);
  }
}

// fp32 on the wire (fp32 itself, and native) flags non-finite inputs from the result alone
// (AllReduceAlgorithm::resultKeepsNonFinite); the other codecs check the inputs first, which
// E2M1 needs: it saturates an inf or a NaN to a finite code (6), so its result can be finite.
TEST(AllReduceSim, NonFiniteIsFlaggedOnEveryRank) {
  using CodecPtr = std::shared_ptr<const precision::Codec>;
  const CodecPtr fp32(precision::makeCodec("fp32")), e2m1(precision::makeCodec("e2m1"));
  const float inf = std::numeric_limits<float>::infinity();
  for (const CodecPtr& codec : {CodecPtr(kHalf), fp32, e2m1}) {
    const bool wireKeepsInf = codec != e2m1;
    for (AllReduceKind kind :
         {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather, AllReduceKind::Native}) {
      const std::string what = codec->name() + " " + std::string(allReduceKindName(kind));
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
        for (int rank : {0, 3}) {
          World w = makeWorld(4, 50);
          w.data[static_cast<size_t>(rank)][17] = bad;
          const SyncStats stats = reduceSim(w, {.kind = kind}, codec, 50);
          EXPECT_TRUE(stats.nonFinite) << what << " " << bad << " on rank " << rank;
          expectIdenticalOnAllRanks(w);
          if (wireKeepsInf) {
            EXPECT_FALSE(std::isfinite(w.data[0][17])) << what;
          }
        }
      }
      // inf and -inf on two ranks: a NaN sum.
      World w = makeWorld(4, 50);
      w.data[1][5] = inf;
      w.data[2][5] = -inf;
      EXPECT_TRUE(reduceSim(w, {.kind = kind}, codec, 50).nonFinite) << what;
      // Overflow of the sum itself is flagged too, where the wire can carry an inf.
      if (!wireKeepsInf) continue;
      std::vector<std::vector<float>> big(2, std::vector<float>(4, 3e38f));
      std::vector<float*> p{big[0].data(), big[1].data()};
      SimTransport sim(2);
      EXPECT_TRUE(makeAllReduce({.kind = kind}, codec)->run(sim, p, 4).nonFinite) << what;
    }
  }
}

TEST(AllReduceSim, BytesOnTheWireFollowTheCodec) {
  const int ranks = 4;
  const int64_t n = 1000;  // 250 per chunk, 500 bytes per encoded chunk
  World w = makeWorld(ranks, n);
  AllReduceOptions noFlag{.kind = AllReduceKind::TwoShot, .checkFinite = false};
  SyncStats s = reduceSim(w, noFlag, kHalf, n);
  for (uint64_t b : s.bytesSent) EXPECT_EQ(b, 2u * 3u * 500u);  // (N-1) chunks out, twice
  noFlag.kind = AllReduceKind::Ring;
  s = reduceSim(w, noFlag, kHalf, n);
  for (uint64_t b : s.bytesSent) EXPECT_EQ(b, 2u * 3u * 500u);
  noFlag.kind = AllReduceKind::Native;
  s = reduceSim(w, noFlag, nullptr, n);
  for (uint64_t b : s.bytesSent) EXPECT_EQ(b, 2u * 3u * 1000u);
  noFlag.kind = AllReduceKind::AllGather;
  s = reduceSim(w, noFlag, kHalf, n);
  for (uint64_t b : s.bytesSent) EXPECT_EQ(b, 3u * 2000u);
}

TEST(AllReduceSim, StochasticRoundingStillAgreesAcrossRanks) {
  const auto sr = std::make_shared<Half16Codec>(true);
  for (AllReduceKind kind : {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather}) {
    World a = makeWorld(5, 301), b = makeWorld(5, 301), c = makeWorld(5, 301);
    reduceSim(a, {.kind = kind, .kahan = true}, sr, 301, {.seed = 3, .stream = 9});
    reduceSim(b, {.kind = kind, .kahan = true}, sr, 301, {.seed = 3, .stream = 9});
    reduceSim(c, {.kind = kind, .kahan = true}, sr, 301, {.seed = 3, .stream = 10});
    expectIdenticalOnAllRanks(a);
    EXPECT_EQ(0, std::memcmp(a.data[0].data(), b.data[0].data(), 301 * 4)) << "same seed, same bits";
    EXPECT_NE(0, std::memcmp(a.data[0].data(), c.data[0].data(), 301 * 4)) << "another stream, other bits";
  }
}

// The trainer's small collectives over the transport: residuals gathered at rank 0 and rank
// 0's decisions broadcast; simulated ranks of one process share the broadcast buffer.
TEST(SmallCollectives, GatherToRankZeroAndBroadcastOnSimulatedRanks) {
  SimTransport sim(3);
  std::vector<std::vector<int32_t>> mine{{1, 2}, {3, 4}, {5, 6}}, gathered(3, std::vector<int32_t>(2, 0));
  std::vector<const void*> in;
  std::vector<void*> out;
  for (auto& v : mine) in.push_back(v.data());
  for (auto& v : gathered) out.push_back(v.data());
  gatherToRankZero(sim, in, 2 * sizeof(int32_t), out);
  EXPECT_EQ(gathered, mine);
  std::vector<uint8_t> flags{1, 0, 1};
  broadcastFromRankZero(sim, flags.data(), flags.size());
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_THROW(gatherToRankZero(sim, std::span<const void* const>(in).first(2), 8, out), aps::Error);
}

TEST(AllReduceSim, RejectsBadArguments) {
  SimTransport sim(3);
  std::vector<float> x(4);
  std::vector<float*> one{x.data()};
  EXPECT_THROW(makeAllReduce({}, kHalf)->run(sim, one, 4), Error);
  EXPECT_THROW(makeAllReduce({.kind = AllReduceKind::Ring}, nullptr), Error);
  EXPECT_THROW(parseAllReduceKind("butterfly"), Error);
  EXPECT_EQ(parseAllReduceKind("two_shot"), AllReduceKind::TwoShot);
  EXPECT_THROW(SimTransport(0), Error);
}

}  // namespace
}  // namespace aps::comm
