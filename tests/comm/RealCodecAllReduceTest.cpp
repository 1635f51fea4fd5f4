// The schedules on precision/'s codecs (makeCodec): 8- and 4-bit float formats, with
// stochastic rounding, and Dettmers' block-scaled 8-bit types, on simulated ranks.
#include "comm/AllReduceAlgorithm.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace aps::comm {
namespace {

struct Result {
  std::vector<std::vector<float>> data;
  double rmsRelativeError = 0.0;
};

Result reduce(const std::string& codec, AllReduceOptions options, int ranks, int64_t n) {
  Result r;
  std::vector<double> exact(static_cast<size_t>(n), 0.0);
  std::vector<float*> p;
  for (int k = 0; k < ranks; ++k) {
    Rng rng(100 + static_cast<uint64_t>(k));
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = rng.normal();
      exact[i] += v[i];
    }
    r.data.push_back(std::move(v));
  }
  for (auto& d : r.data) p.push_back(d.data());
  SimTransport sim(ranks);
  makeAllReduce(options, std::shared_ptr<const precision::Codec>(precision::makeCodec(codec)))
      ->run(sim, p, n, {.seed = 1, .stream = 2, .offset = 0});
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    err += (r.data[0][i] - exact[i]) * (r.data[0][i] - exact[i]);
    ref += exact[i] * exact[i];
  }
  r.rmsRelativeError = n > 0 ? std::sqrt(err / ref) : 0.0;
  return r;
}

const std::vector<std::string> kCodecs{
    "fp16",           "bf16", "e5m2", "e4m3", "e4m3:stochastic", "e4m3_ieee", "e3m0", "dettmers_dynamic/block256",
    "dettmers_linear"};

TEST(RealCodecAllReduce, EveryCodecAndAlgorithmAgreesOnAllRanks) {
  for (const std::string& codec : kCodecs) {
    for (AllReduceKind kind : {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather}) {
      for (int64_t n : {1, 3, 1001}) {
        Result r = reduce(codec, {.kind = kind, .kahan = kind == AllReduceKind::AllGather}, 5, n);
        for (size_t k = 1; k < r.data.size(); ++k) {
          EXPECT_EQ(0, std::memcmp(r.data[0].data(), r.data[k].data(), static_cast<size_t>(n) * 4))
              << codec << " " << allReduceKindName(kind) << " n=" << n << " rank " << k;
        }
      }
    }
  }
}

// The simulator, a transport whose local ranks share memory, where fp32's two_shot sums the
// inputs where they lie instead of encoding them (Codec::encodesFp32Bits): the same bytes as
// through a transport that copies every message, NaNs of both signs and other payloads and
// infinities included, for fp32 itself and for `native`'s wire codec.
class CopyingSimTransport final : public Transport {
 public:
  explicit CopyingSimTransport(int ranks) : sim_(ranks) {}
  std::string transportName() const override { return "copying sim"; }
  int worldSize() const override { return sim_.worldSize(); }
  int firstLocalRank() const override { return sim_.firstLocalRank(); }
  int localRankCount() const override { return sim_.localRankCount(); }
  void exchange(std::span<const Message> round) override { sim_.exchange(round); }

 private:
  SimTransport sim_;
};

TEST(RealCodecAllReduce, Fp32InputsReadInPlaceGiveTheBitsOfCopiedMessages) {
  const int ranks = 5;
  const int64_t n = 3001;
  auto inputs = [&] {
    std::vector<std::vector<float>> data;
    for (int k = 0; k < ranks; ++k) {
      Rng rng(300 + static_cast<uint64_t>(k));
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = rng.normal();
      data.push_back(std::move(v));
    }
    const float inf = std::numeric_limits<float>::infinity();
    auto nan = [](uint32_t bits) { return std::bit_cast<float>(bits); };
    data[1][7] = nan(0x7fc00001u);    // a quiet NaN with a payload
    data[3][7] = nan(0xffc12345u);    // and a negative one later in rank order
    data[2][100] = nan(0xff800001u);  // a negative signalling NaN alone
    data[0][2000] = inf;              // inf + -inf
    data[4][2000] = -inf;
    data[4][2999] = -inf;     // an infinity alone
    data[0][1500] = 3.0e38f;  // finite inputs whose sum overflows
    data[1][1500] = 3.0e38f;
    return data;
  };
  for (const AllReduceKind kind : {AllReduceKind::TwoShot, AllReduceKind::Native}) {
    for (const int64_t segmentBytes : {int64_t{0}, int64_t{1024}}) {
      auto shared = inputs(), copied = inputs();
      std::vector<float*> ps, pc;
      for (auto& d : shared) ps.push_back(d.data());
      for (auto& d : copied) pc.push_back(d.data());
      const AllReduceOptions options{.kind = kind, .segmentBytes = segmentBytes};
      SimTransport sim(ranks);
      CopyingSimTransport copying(ranks);
      ASSERT_TRUE(sim.sharesMemory());
      ASSERT_FALSE(copying.sharesMemory());
      const SyncStats a = makeAllReduce(options, std::shared_ptr<const precision::Codec>(precision::makeCodec("fp32")))
                              ->run(sim, ps, n);
      const SyncStats b = makeAllReduce(options, std::shared_ptr<const precision::Codec>(precision::makeCodec("fp32")))
                              ->run(copying, pc, n);
      for (int k = 0; k < ranks; ++k) {
        EXPECT_EQ(0, std::memcmp(shared[static_cast<size_t>(k)].data(), copied[static_cast<size_t>(k)].data(),
                                 static_cast<size_t>(n) * 4))
            << allReduceKindName(kind) << " segments of " << segmentBytes << " bytes, rank " << k;
      }
      EXPECT_TRUE(std::isnan(shared[0][7]) && std::isnan(shared[0][100]) && std::isnan(shared[0][2000]));
      EXPECT_TRUE(std::signbit(shared[0][100]));
      EXPECT_EQ(shared[0][2999], -std::numeric_limits<float>::infinity());
      EXPECT_EQ(a.bytesSent, b.bytesSent);
      EXPECT_TRUE(a.nonFinite && b.nonFinite);
    }
  }
}

// Agreement across ranks is not enough: the reduced sum must be the exact sum within what the
// format's rounding allows, for every codec and schedule. The bounds are the rms relative
// error of the sum of 5 seeded N(0,1) inputs (measured for two_shot and allgather, then
// rounded up to the next power of two: fp16 3.2e-4, bf16 2.6e-3, e5m2 0.085, e4m3 0.043,
// e4m3 stochastic 0.057, e3m0 0.33, Dettmers dynamic 0.020, linear 0.013); ring re-rounds
// at each of its 4 hops and gets twice the bound.
TEST(RealCodecAllReduce, EveryCodecAndAlgorithmIsCloseToTheExactSum) {
  const std::vector<std::pair<std::string, double>> bounds{
      {"fp16", 1.0 / 2048},         {"bf16", 1.0 / 256},     {"e5m2", 1.0 / 8}, {"e4m3", 1.0 / 16},
      {"e4m3:stochastic", 1.0 / 8}, {"e4m3_ieee", 1.0 / 16}, {"e3m0", 1.0 / 2}, {"dettmers_dynamic/block256", 1.0 / 32},
      {"dettmers_linear", 1.0 / 64}};
  ASSERT_EQ(bounds.size(), kCodecs.size());
  for (const auto& [codec, bound] : bounds) {
    for (AllReduceKind kind : {AllReduceKind::Ring, AllReduceKind::TwoShot, AllReduceKind::AllGather}) {
      const Result r = reduce(codec, {.kind = kind, .kahan = kind == AllReduceKind::AllGather}, 5, 1001);
      const double allowed = kind == AllReduceKind::Ring ? 2 * bound : bound;
      std::printf("%s %s rms relative error %.6f (bound %.6f)\n", codec.c_str(),
                  std::string(allReduceKindName(kind)).c_str(), r.rmsRelativeError, allowed);
      EXPECT_LT(r.rmsRelativeError, allowed) << codec << " " << allReduceKindName(kind);
      EXPECT_GT(r.rmsRelativeError, 0.0) << codec << " " << allReduceKindName(kind) << ": nothing was quantised";
    }
  }
}

TEST(RealCodecAllReduce, TwoShotErrorMatchesTheFormatAndBeatsRingAtScale) {
  // Relative rounding errors of round-to-nearest: 2^-(mantissa bits + 1).
  const std::vector<std::pair<std::string, double>> formats{
      {"fp16", 1.0 / 2048}, {"bf16", 1.0 / 256}, {"e4m3", 1.0 / 16}, {"e5m2", 1.0 / 8}};
  for (const auto& [codec, u] : formats) {
    const Result twoShot = reduce(codec, {.kind = AllReduceKind::TwoShot}, 32, 4096);
    const Result ring = reduce(codec, {.kind = AllReduceKind::Ring}, 32, 4096);
    EXPECT_LT(twoShot.rmsRelativeError, u) << codec;
    EXPECT_GT(twoShot.rmsRelativeError, u / 100) << codec << ": the format must actually quantise";
    EXPECT_GT(ring.rmsRelativeError, 1.5 * twoShot.rmsRelativeError) << codec;
  }
}

}  // namespace
}  // namespace aps::comm
