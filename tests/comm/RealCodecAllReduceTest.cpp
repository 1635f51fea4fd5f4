// The schedules on precision/'s codecs (makeCodec): 8- and 4-bit float formats, with
// stochastic rounding, and Dettmers' block-scaled 8-bit types, on simulated ranks.
#include "comm/AllReduceAlgorithm.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
