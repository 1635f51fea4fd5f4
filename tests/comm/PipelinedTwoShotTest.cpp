// two_shot's pipeline (comm/TwoShotAllReduce.h): cutting chunks into segments must not change
// a bit of the result, a byte of the count or anything an observer sees, for every codec
// family, and the schedule must respect the asynchronous Transport contract.
#include "comm/AllReduceAlgorithm.h"
#include "comm/ExchangeSchedule.h"
#include "comm/Fp32WireCodec.h"
#include "comm/SimTransport.h"
#include "comm/SubTransport.h"
#include "comm/TwoShotAllReduce.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "tests/comm/TestCodecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace aps::comm {
namespace {

// Every codec family: plain floats of each width (nibbles, bytes, two bytes, the fp32 wire),
// stochastic rounding, Dettmers' blocks and block-scaled (OCP MX) codecs; the last two also
// without blocks (one scale per chunk), which cannot be cut.
const std::vector<std::string> kSpecs = {"fp32",
                                         "fp16",
                                         "bf16",
                                         "e4m3",
                                         "e5m2",
                                         "e2m1",
                                         "e3m0",
                                         "e4m3:stochastic",
                                         "e2m1:stochastic",
                                         "bf16:stochastic",
                                         "e5m2:toward_zero",
                                         "dettmers_dynamic/block256",
                                         "dettmers_linear/block64",
                                         "dettmers_dynamic",
                                         "mxfp4",
                                         "e3m0/block32",
                                         "mxfp8_e4m3",
                                         "e2m1:stochastic/block16",
                                         "e4m3/block0"};

std::shared_ptr<const precision::Codec> codecOf(const std::string& spec) { return precision::makeCodec(spec); }

// Inputs that reach every corner of a codec: magnitudes over many binades (block scales differ
// from block to block; some values flush, some saturate or overflow), exact zeros, signs, and
// a few infinities and NaNs of either sign (whose sums are NaNs of either sign).
std::vector<std::vector<float>> inputs(int ranks, int64_t n, uint64_t seed) {
  std::vector<std::vector<float>> data;
  for (int r = 0; r < ranks; ++r) {
    Rng rng(seed * 131 + static_cast<uint64_t>(r));
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) {
      const auto kind = rng.below(256);
      const int binade = static_cast<int>(rng.below(41)) - 20;
      const float sign = rng.below(2) ? -1.0f : 1.0f;
      if (kind < 16) {
        x = 0.0f;
      } else if (kind == 16) {
        x = std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
      } else if (kind == 17) {
        x = sign * std::numeric_limits<float>::infinity();
      } else {
        x = std::ldexp(rng.normal(), binade);
      }
    }
    data.push_back(std::move(v));
  }
  return data;
}

std::vector<float*> pointers(std::vector<std::vector<float>>& data) {
  std::vector<float*> p;
  for (auto& d : data) p.push_back(d.data());
  return p;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// What a run produced: every rank's result and bytes sent, the finite flag.
struct Outcome {
  std::vector<std::vector<float>> data;
  SyncStats stats;
};

Outcome runSim(const AllReduceAlgorithm& algorithm, Transport& transport, int ranks, int64_t n,
               EncodeObserver* observer = nullptr) {
  Outcome out{inputs(ranks, n, 3), {}};
  const precision::EncodeContext ctx{.seed = 17, .stream = static_cast<uint64_t>(n), .offset = 5};
  out.stats = algorithm.run(transport, pointers(out.data), n, ctx, observer);
  return out;
}

void expectSame(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  for (size_t r = 0; r < a.data.size(); ++r) EXPECT_TRUE(sameBits(a.data[r], b.data[r])) << what << " rank " << r;
  EXPECT_EQ(a.stats.bytesSent, b.stats.bytesSent) << what;
  EXPECT_EQ(a.stats.nonFinite, b.stats.nonFinite) << what;
}

std::unique_ptr<AllReduceAlgorithm> twoShot(const std::string& spec, int64_t segmentBytes) {
  if (spec == "fp32") return makeAllReduce({.kind = AllReduceKind::Native, .segmentBytes = segmentBytes}, nullptr);
  return makeAllReduce({.kind = AllReduceKind::TwoShot, .segmentBytes = segmentBytes}, codecOf(spec));
}

// The schedule as it was before pipelining, written out for a simulated world: every rank
// encodes its chunks, the owner decodes and sums them in rank order in fp32 and encodes the sum
// once, everyone decodes the sums. The reference for "the bits did not change".
std::vector<float> unpipelinedTwoShot(const precision::Codec& codec, std::vector<std::vector<float>> data, int64_t n,
                                      const precision::EncodeContext& ctx, uint64_t* bytesPerRank) {
  const int world = static_cast<int>(data.size());
  auto begin = [&](int c) { return n * c / world; };
  auto size = [&](int c) { return begin(c + 1) - begin(c); };
  std::vector<float> result(static_cast<size_t>(n));
  uint64_t sent = 0;
  for (int c = 0; c < world; ++c) {
    const int64_t len = size(c);
    if (len == 0) continue;
    std::vector<float> sum(static_cast<size_t>(len));
    std::vector<uint8_t> bytes(codec.encodedBytes(len));
    for (int r = 0; r < world; ++r) {
      codec.encode(data[static_cast<size_t>(r)].data() + begin(c), len, bytes.data(),
                   scheduleEncodeContext(ctx, r, TwoShotAllReduce::kEncodeInputPhase, begin(c)));
      if (r == 0) {
        codec.decode(bytes.data(), len, sum.data());
      } else {
        codec.decodeAdd(bytes.data(), len, sum.data());
      }
    }
    codec.encode(sum.data(), len, bytes.data(),
                 scheduleEncodeContext(ctx, c, TwoShotAllReduce::kEncodeSumPhase, begin(c)));
    codec.decode(bytes.data(), len, result.data() + begin(c));
    // Rank 0 sends chunk c to its owner (unless it owns it) and, owning chunk 0, its sum to all.
    if (c != 0) sent += bytes.size();
    if (c == 0) sent += bytes.size() * static_cast<uint64_t>(world - 1);
  }
  *bytesPerRank = sent;
  return result;
}

TEST(PipelinedTwoShot, SegmentsChangeNoBitAndNoByteForAnyCodec) {
  for (const std::string& spec : kSpecs) {
    for (int ranks : {1, 2, 3, 4, 5}) {
      for (int64_t n : {0, 1, 2, 3, 4, 7, 64, 999, 4097, 10001}) {
        const Outcome reference = [&] {
          SimTransport sim(ranks);
          return runSim(*twoShot(spec, 0), sim, ranks, n);
        }();
        for (int64_t segment : {1, 100, 300, 1000, 5000}) {
          SimTransport sim(ranks);
          const auto algorithm = twoShot(spec, segment);
          expectSame(runSim(*algorithm, sim, ranks, n), reference,
                     algorithm->name() + " ranks=" + std::to_string(ranks) + " n=" + std::to_string(n) +
                         " segment=" + std::to_string(segment));
        }
      }
    }
  }
}

TEST(PipelinedTwoShot, MatchesTheUnpipelinedScheduleWrittenOut) {
  const int ranks = 4;
  for (const std::string& spec : kSpecs) {
    const auto codec =
        spec == "fp32" ? std::shared_ptr<const precision::Codec>(std::make_shared<Fp32WireCodec>()) : codecOf(spec);
    for (int64_t n : {0, 3, 1001, 50000}) {
      for (int64_t segment : {int64_t{0}, int64_t{200}, kDefaultSegmentBytes}) {
        SimTransport sim(ranks);
        const auto algorithm = twoShot(spec, segment);
        const Outcome got = runSim(*algorithm, sim, ranks, n);
        uint64_t bytes = 0;
        const precision::EncodeContext ctx{.seed = 17, .stream = static_cast<uint64_t>(n), .offset = 5};
        const std::vector<float> expected = unpipelinedTwoShot(*codec, inputs(ranks, n, 3), n, ctx, &bytes);
        const std::string what = algorithm->name() + " n=" + std::to_string(n) + " segment=" + std::to_string(segment);
        for (int r = 0; r < ranks; ++r) EXPECT_TRUE(sameBits(got.data[static_cast<size_t>(r)], expected)) << what;
        // The finite flag's byte to each other rank comes on top, except with fp32 on the
        // wire, whose result flags non-finite inputs itself.
        EXPECT_EQ(got.stats.bytesSent.at(0), bytes + (codec->encodesFp32Bits() ? 0 : ranks - 1)) << what;
      }
    }
  }
}

TEST(PipelinedTwoShot, TinySegmentsMakeManyRounds) {
  // 4 ranks x 20000 values: segments of one granule give thousands of pipelined rounds.
  const int ranks = 4;
  const int64_t n = 80000;
  for (const std::string spec : {"e2m1", "e4m3:stochastic", "mxfp4", "dettmers_linear/block64", "fp32"}) {
    SimTransport sim(ranks);
    const auto reference = runSim(*twoShot(spec, 0), sim, ranks, n);
    const auto tiny = twoShot(spec, 1);
    const auto* pipelined = dynamic_cast<const TwoShotAllReduce*>(tiny.get());
    ASSERT_NE(pipelined, nullptr);
    const auto segments = pipelined->segments(n, ranks);
    const int64_t granule = spec == "fp32" ? Fp32WireCodec().splitGranule() : codecOf(spec)->splitGranule();
    EXPECT_EQ(segments.length, granule) << spec;
    EXPECT_GE(segments.count, 20000 / 64) << spec;
    expectSame(runSim(*tiny, sim, ranks, n), reference, tiny->name());
  }
}

TEST(PipelinedTwoShot, SegmentLengthsFollowTheCodecsGranule) {
  // Plain floats cut at multiples of their vector width, blocks at whole blocks (and whole
  // bytes: e2m1 blocks of 3 at 6), codecs with one scale per chunk not at all.
  EXPECT_EQ(codecOf("e4m3")->splitGranule(), 64);
  EXPECT_EQ(codecOf("e2m1")->splitGranule(), 64);
  EXPECT_EQ(codecOf("fp16")->splitGranule(), 64);
  EXPECT_EQ(codecOf("mxfp4")->splitGranule(), 32);
  EXPECT_EQ(codecOf("e2m1/block3")->splitGranule(), 6);
  EXPECT_EQ(codecOf("dettmers_dynamic/block256")->splitGranule(), 256);
  EXPECT_EQ(codecOf("dettmers_dynamic")->splitGranule(), 0);
  EXPECT_EQ(codecOf("e4m3/block0")->splitGranule(), 0);

  // Segments of about 1000 wire bytes: 1000 bytes of e4m3 are 1000 values, 960 in whole
  // granules; mxfp4 takes 5313 bytes for 10000 values, so 1882 values, 1856 in whole blocks.
  const TwoShotAllReduce e4m3(codecOf("e4m3"), "two_shot", 1000);
  EXPECT_EQ(e4m3.segments(4 * 10000, 4).length, 960);
  EXPECT_EQ(e4m3.segments(4 * 10000, 4).count, 11);
  const TwoShotAllReduce mx(codecOf("mxfp4"), "two_shot", 1000);
  EXPECT_EQ(mx.segments(4 * 10000, 4).length, 1856);
  EXPECT_EQ(mx.segments(4 * 10000, 4).count, 6);
  EXPECT_EQ(mx.segments(0, 4).count, 0);
  EXPECT_EQ(mx.segments(3, 4).length, 1);  // chunks shorter than a segment: one piece
  EXPECT_EQ(mx.segments(3, 4).count, 1);
  const TwoShotAllReduce whole(codecOf("dettmers_dynamic"), "two_shot", 1000);
  EXPECT_EQ(whole.segments(100000, 4).count, 1);
  EXPECT_EQ(whole.segments(100000, 4).length, 25000);
  const TwoShotAllReduce off(codecOf("e4m3"), "two_shot", 0);
  EXPECT_EQ(off.segments(100001, 4).count, 1);
  EXPECT_EQ(off.segments(100001, 4).length, 25001);
}

// Records every encode an all-reduce reports.
class Recorder final : public EncodeObserver {
 public:
  struct Call {
    Site site;
    int64_t begin, n;
    std::vector<float> values, decoded;
  };
  void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) override {
    calls.push_back({site, begin, n, std::vector<float>(values, values + n), std::vector<float>(decoded, decoded + n)});
  }
  std::vector<Call> calls;
};

TEST(PipelinedTwoShot, ObserversSeeTheSameCallsAsWithoutSegments) {
  const int ranks = 3;
  for (const std::string spec : {"e4m3:stochastic", "e2m1", "mxfp4", "dettmers_dynamic/block256", "fp32"}) {
    for (int64_t n : {1, 5, 3001, 20000}) {
      Recorder whole, cut;
      SimTransport sim(ranks);
      const Outcome a = runSim(*twoShot(spec, 0), sim, ranks, n, &whole);
      const Outcome b = runSim(*twoShot(spec, 64), sim, ranks, n, &cut);
      const std::string what = spec + " n=" + std::to_string(n);
      expectSame(a, b, what);
      ASSERT_EQ(whole.calls.size(), cut.calls.size()) << what;
      // One call per non-empty chunk of each rank's input, one per non-empty sum.
      const auto chunks = static_cast<size_t>(std::min<int64_t>(n, ranks));
      ASSERT_EQ(whole.calls.size(), chunks * ranks + chunks) << what;
      for (size_t k = 0; k < whole.calls.size(); ++k) {
        const auto &x = whole.calls[k], &y = cut.calls[k];
        EXPECT_EQ(x.site, y.site) << what << " call " << k;
        EXPECT_EQ(x.begin, y.begin) << what << " call " << k;
        EXPECT_EQ(x.n, y.n) << what << " call " << k;
        EXPECT_TRUE(sameBits(x.values, y.values)) << what << " call " << k;
        EXPECT_TRUE(sameBits(x.decoded, y.decoded)) << what << " call " << k;
      }
    }
  }
}

// A transport that delivers a started round only when it is waited for, after poisoning the
// round's receive buffers at the start, and that reports a round complete only on the third
// test: a schedule that reads a receive buffer early, changes a send buffer before the round
// is waited for, or waits out of order gets wrong bits.
class DeferredTransport final : public Transport {
 public:
  explicit DeferredTransport(int world) : world_(world) {}
  std::string transportName() const override { return "deferred-sim"; }
  int worldSize() const override { return world_; }
  int firstLocalRank() const override { return 0; }
  int localRankCount() const override { return world_; }
  void exchange(std::span<const Message> round) override { waitExchange(startExchange(round)); }
  ExchangeTicket startExchange(std::span<const Message> round) override {
    for (const Message& m : round) {
      if (m.recvData != m.sendData) std::memset(m.recvData, 0xA5, m.bytes);
    }
    pending_.push_back({next_, std::vector<Message>(round.begin(), round.end()), 0});
    ++started;
    maxInFlight = std::max(maxInFlight, static_cast<int>(pending_.size()));
    return next_++;
  }
  bool testExchange(ExchangeTicket ticket) override {
    ++tests;
    for (auto& p : pending_)
      if (p.ticket == ticket) return ++p.tests >= 3;
    ADD_FAILURE() << "test of ticket " << ticket << ", not in flight";
    return true;
  }
  void waitExchange(ExchangeTicket ticket) override {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->ticket != ticket) continue;
      for (const Message& m : it->round) {
        if (m.recvData != m.sendData) std::memmove(m.recvData, m.sendData, m.bytes);
      }
      pending_.erase(it);
      return;
    }
    ADD_FAILURE() << "wait for ticket " << ticket << ", not in flight";
  }
  bool idle() const { return pending_.empty(); }
  int started = 0, tests = 0, maxInFlight = 0;

 private:
  struct Pending {
    ExchangeTicket ticket;
    std::vector<Message> round;
    int tests;
  };
  int world_;
  ExchangeTicket next_ = 1;
  std::deque<Pending> pending_;
};

TEST(PipelinedTwoShot, RespectsTheAsynchronousTransportContract) {
  const int ranks = 4;
  for (const std::string spec : {"e4m3:stochastic", "e2m1", "mxfp4", "fp32", "dettmers_dynamic"}) {
    for (int64_t n : {0, 2, 777, 30000}) {
      SimTransport sim(ranks);
      const Outcome reference = runSim(*twoShot(spec, 0), sim, ranks, n);
      DeferredTransport deferred(ranks);
      const auto algorithm = twoShot(spec, 100);
      const std::string what = algorithm->name() + " n=" + std::to_string(n);
      expectSame(runSim(*algorithm, deferred, ranks, n), reference, what);
      EXPECT_TRUE(deferred.idle()) << what << ": every started round is waited for";
      if (n == 30000 && spec != "dettmers_dynamic") {
        EXPECT_GE(deferred.maxInFlight, 2) << what << ": rounds overlap";
        EXPECT_GT(deferred.tests, 0) << what << ": the schedule drives progress";
      }
    }
  }
}

TEST(PipelinedTwoShot, SubWorldsForwardTheirRoundsInFlight) {
  // Two sub-worlds of two ranks (stride 2) over a deferred transport of four.
  const int64_t n = 5000;
  const auto algorithm = twoShot("e4m3:stochastic", 64);
  const auto reference = twoShot("e4m3:stochastic", 0);
  DeferredTransport deferred(4);
  SimTransport sim(4);
  for (int first : {0, 1}) {
    SubTransport sub(deferred, first, 2, 2), subSim(sim, first, 2, 2);
    const Outcome got = runSim(*algorithm, sub, 2, n);
    expectSame(got, runSim(*reference, subSim, 2, n), "sub-world from " + std::to_string(first));
    EXPECT_TRUE(deferred.idle());
  }
  EXPECT_GT(deferred.started, 100);
}

}  // namespace
}  // namespace aps::comm
