// APS around the gradient reducer on simulated ranks: tiny gradients that plain E4M3 flushes
// to zero survive with APS, no sum overflows, and every rank ends with the same bits.
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "comm/InputFacts.h"
#include "comm/SimTransport.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "precision/kernels/Scaling.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>

namespace aps::comm {
namespace {

struct Result {
  std::vector<std::vector<float>> grads;  // [rank][value] after the reduction
  double relError = 0.0;                  // of rank 0 against the exact fp64 mean
  std::shared_ptr<BucketScaling> scaling;
  bool nonFinite = false;
  size_t shiftsLeft = 0;   // input shifts the hooks left to the reduction (InputFacts::shifts)
  int64_t inputsSeen = 0;  // values of the inputs' encodes an observer saw
  bool sticky16 = false;   // the reducer kept ranks 1, 2, ... as sticky 16-bit keys
};

// An observer of the inputs' encodes: the reduction must then encode them where the
// observer can see them (and so scale the buffers in place first).
class InputWatcher : public EncodeObserver {
 public:
  int64_t values = 0;
  bool observes(Site site) const override { return site == Site::Input; }
  void encoded(Site /*site*/, int64_t /*begin*/, int64_t n, const float* /*values*/,
               const float* /*decoded*/) override {
    values += n;
  }
};

// The scaling chain as the reducer's hook, with a test's changes: it counts the input shifts
// the chain left for the reduction; a watcher, where given, observes the encodes instead (it
// reads every rank's inputs: no sticky keys); sticky16 false forbids sticky keys.
class WatchedChain : public ReductionHook {
 public:
  WatchedChain(BucketScaling& chain, size_t& shiftsLeft, InputWatcher* watcher, bool sticky16)
      : chain_(chain), shiftsLeft_(shiftsLeft), watcher_(watcher), sticky16_(sticky16) {}
  void beforeReduce(const BucketContext& c) override {
    chain_.beforeReduce(c);
    shiftsLeft_ += c.inputs->shifts.size();
  }
  void afterReduce(const BucketContext& c) override { chain_.afterReduce(c); }
  EncodeObserver* encodeObserver(const BucketContext& c) override {
    return watcher_ != nullptr ? watcher_ : chain_.encodeObserver(c);
  }
  bool readsInputs(int format) const override { return chain_.readsInputs(format); }
  bool readsFirstRankOnly(int format) const override {
    return watcher_ == nullptr && sticky16_ && chain_.readsFirstRankOnly(format);
  }

 private:
  BucketScaling& chain_;
  size_t& shiftsLeft_;
  InputWatcher* watcher_;
  bool sticky16_;
};

// A value planted in one rank's gradient before the reduction.
struct Poison {
  int rank = -1;  // none
  size_t index = 0;
  float value = 0.0f;
};

// Two layers on `world` ranks: layer 0 tiny (1e-7 scale), layer 1 large (1e3 scale), a zero
// at value 7 (-0 on rank 0). sticky16 false: the reducer keeps every rank's fp32 copy
// (ReductionHook::readsFirstRankOnly). handOver: ranks 1, 2, ... hand their gradients over from buffers of their
// own (markReadyFrom, as the trainer's gradient taker does), with -0 for the zero, while their
// registered buffers hold NaN.
Result reduce(int world, precision::ScalingMode mode, Poison poison = {}, bool watchInputs = false,
              float tinyScale = 1e-7f, bool sticky16 = true, bool handOver = false) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  SimTransport transport(world);
  Rng rng(11);
  const std::vector<int64_t> sizes{300, 200};
  const std::vector<float> scales{tinyScale, 1e3f};
  Result r;
  r.grads.assign(static_cast<size_t>(world), {});
  std::vector<double> exact(500, 0.0);
  std::vector<std::vector<NamedGradient>> named(static_cast<size_t>(world));
  for (int k = 0; k < world; ++k) {
    auto& g = r.grads[static_cast<size_t>(k)];
    g.resize(500);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = rng.normal() * scales[i < 300 ? 0 : 1];
      exact[i] += g[i];
    }
    exact[7] -= g[7];
    g[7] = k == 0 ? -0.0f : 0.0f;  // the sum starts at -0: only +0 (0 + g) added turns it +0
    if (k == poison.rank) g[poison.index] = poison.value;
    named[static_cast<size_t>(k)] = {{"a", {g.data(), 300}}, {"b", {g.data() + 300, 200}}};
  }
  std::vector<std::vector<float>> handed(static_cast<size_t>(world));
  for (int k = 1; k < world && handOver; ++k) {
    auto& g = r.grads[static_cast<size_t>(k)];
    handed[static_cast<size_t>(k)] = g;
    handed[static_cast<size_t>(k)][7] = -0.0f;
    std::fill(g.begin(), g.end(), std::numeric_limits<float>::quiet_NaN());
  }
  auto codec = std::shared_ptr<const precision::Codec>(precision::makeCodec("e4m3"));
  auto algorithm = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({}, codec));
  ReducerOptions options;
  options.average = true;
  BucketScaling::FormatScaling f;
  f.scaler = std::make_shared<precision::ApsScaler>(e4m3, world, mode);
  f.format = e4m3;
  r.scaling = std::make_shared<BucketScaling>(std::vector<BucketScaling::FormatScaling>{f}, 2, 10);
  InputWatcher watcher;
  WatchedChain hook(*r.scaling, r.shiftsLeft, watchInputs ? &watcher : nullptr, sticky16);
  options.hook = &hook;
  GradientReducer reducer(transport, std::move(named), {algorithm}, {}, options);
  for (int k = 0; k < world; ++k) {
    if (handOver) {
      // Ranks 1, 2, ... take a gradient handed over; rank 0 is marked as before.
      const float* from = k > 0 ? handed[static_cast<size_t>(k)].data() : r.grads[0].data();
      EXPECT_EQ(reducer.markReadyFrom(1, k, from + 300), k > 0) << k;
      if (k == 0) reducer.markReady(1, k);
      EXPECT_EQ(reducer.markReadyFrom(0, k, from), k > 0) << k;
      if (k == 0) reducer.markReady(0, k);
      continue;
    }
    reducer.markReady(1, k);
    reducer.markReady(0, k);
  }
  r.nonFinite = reducer.wait().nonFinite;
  r.sticky16 = reducer.keepsSticky16(0);
  r.inputsSeen = watcher.values;
  double err = 0, norm = 0;
  for (size_t i = 0; i < 300; ++i) {  // the tiny layer
    const double mean = exact[i] / world;
    err += (r.grads[0][i] - mean) * (r.grads[0][i] - mean);
    norm += mean * mean;
  }
  r.relError = std::sqrt(err / norm);
  return r;
}

TEST(BucketScaling, ApsRescuesGradientsThatE4m3FlushesToZero) {
  const Result plain = reduce(4, precision::ScalingMode::None);
  const Result aps = reduce(4, precision::ScalingMode::Aps);
  EXPECT_GT(plain.relError, 0.9);  // 1e-7 is far below E4M3's smallest subnormal (2^-9)
  EXPECT_TRUE(plain.nonFinite);    // and 4 x 1e3 sums beyond its max (448): NaN
  EXPECT_FALSE(aps.nonFinite);
  EXPECT_LT(aps.relError, 0.1);  // a few 3-bit-mantissa roundings
  EXPECT_GT(plain.scaling->statistics(0).flushedFraction(), 0.9);
  EXPECT_LT(aps.scaling->statistics(0).flushedFraction(), 0.05);
  EXPECT_GT(aps.scaling->lastShift(0), 20);  // 2^20+ to lift 1e-7 into range
  EXPECT_LT(aps.scaling->lastShift(1), 0);   // 1e3 * 4 ranks must come down below 448
  for (const auto& g : aps.grads) {
    EXPECT_EQ(g, aps.grads[0]);  // identical bits on every rank
    for (float v : g) EXPECT_TRUE(std::isfinite(v));
  }
}

// APS leaves its shifts to the reduction, which scales each sender's values as it encodes
// them (the simulator's two_shot); where an observer must see the inputs' encodes, the
// buffers are scaled in place first. Both give the bits of scaling first, on any world size
// (16 ranks: chunks of about 31 values, cut across the layers' boundary).
TEST(BucketScaling, ShiftsLeftToTheReductionGiveTheBitsOfScalingInPlace) {
  for (int world : {2, 4, 16}) {
    for (auto mode : {precision::ScalingMode::Aps, precision::ScalingMode::Global}) {
      const Result left = reduce(world, mode);
      const Result inPlace = reduce(world, mode, {}, true);
      EXPECT_EQ(left.shiftsLeft, 2u) << world;  // both layers shifted (1e-7 up, 1e3 down)
      EXPECT_EQ(left.inputsSeen, 0) << world;
      EXPECT_EQ(inPlace.inputsSeen, 500 * world) << world;
      EXPECT_EQ(left.grads, inPlace.grads) << "world " << world << " " << precision::scalingModeName(mode);
      EXPECT_EQ(left.scaling->statistics(0).flushedFraction(), inPlace.scaling->statistics(0).flushedFraction());
    }
  }
}

TEST(BucketScaling, ShiftedInputsScaleOnlyWhatAShiftCovers) {
  const std::vector<InputShift> shifts = {{10, 20, 3}, {30, 5, 0}, {40, 5, -2}};
  std::vector<float> in(60), out(60, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 1.0f + static_cast<float>(i);
  // [30, 40) holds no shift but 0: read in place.
  EXPECT_EQ(shiftedInputs(shifts, 30, 10, in.data() + 30, out.data()), in.data() + 30);
  const float* got = shiftedInputs(shifts, 5, 45, in.data() + 5, out.data());
  ASSERT_EQ(got, out.data());
  for (int64_t i = 5; i < 50; ++i) {
    const float want = i >= 10 && i < 30 ? in[i] * 8.0f : i >= 40 && i < 45 ? in[i] * 0.25f : in[i];
    EXPECT_EQ(got[i - 5], want) << i;
  }
}

// The simulator keeps ranks 1, 2, ... as sticky 16-bit keys under APS with E4M3 (half the
// bytes): the reduction must give the bits of full fp32 copies, for both scaling modes, with a
// NaN on some rank, and for a layer of fp32 subnormals (kept whole: the shift that lifts them
// into E4M3's range is past 127, where a key would not round as its value). The same where
// those ranks hand their gradients over from buffers of their own, as keys or as full copies,
// -0 where the registered buffers would hold 0 + g = +0 (they hold NaN and must not be read).
TEST(BucketScaling, Sticky16CopiesReduceToTheBitsOfFullCopies) {
  for (int world : {2, 5, 8}) {
    for (auto mode : {precision::ScalingMode::Aps, precision::ScalingMode::Global}) {
      for (float tiny : {1e-7f, 3e-39f}) {
        for (const Poison& poison : {Poison{}, Poison{1, 310, std::numeric_limits<float>::quiet_NaN()}}) {
          const Result keys = reduce(world, mode, poison, false, tiny, true);
          const Result full = reduce(world, mode, poison, false, tiny, false);
          const Result handed = reduce(world, mode, poison, false, tiny, true, true);
          const Result handedFull = reduce(world, mode, poison, false, tiny, false, true);
          ASSERT_TRUE(keys.sticky16);
          ASSERT_FALSE(full.sticky16);
          ASSERT_TRUE(handed.sticky16);
          ASSERT_FALSE(handedFull.sticky16);
          EXPECT_EQ(keys.nonFinite, full.nonFinite);
          EXPECT_EQ(handed.nonFinite, full.nonFinite);
          EXPECT_EQ(handedFull.nonFinite, full.nonFinite);
          for (size_t i = 0; i < full.grads[0].size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(keys.grads[0][i]), std::bit_cast<uint32_t>(full.grads[0][i]))
                << "world " << world << " mode " << precision::scalingModeName(mode) << " tiny " << tiny << " value "
                << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(handed.grads[0][i]), std::bit_cast<uint32_t>(full.grads[0][i]))
                << "handed over: world " << world << " mode " << precision::scalingModeName(mode) << " tiny " << tiny
                << " value " << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(handedFull.grads[0][i]), std::bit_cast<uint32_t>(full.grads[0][i]))
                << "handed over, full copies: world " << world << " mode " << precision::scalingModeName(mode)
                << " tiny " << tiny << " value " << i;
          }
        }
      }
    }
  }
  // Without APS (no word on NaN or infinity), or with an observer of the inputs, full copies.
  EXPECT_FALSE(reduce(4, precision::ScalingMode::None).sticky16);
  EXPECT_FALSE(reduce(4, precision::ScalingMode::Aps, {}, true).sticky16);
}

TEST(BucketScaling, GlobalModeUsesOneShift) {
  const Result global = reduce(3, precision::ScalingMode::Global);
  EXPECT_FALSE(global.nonFinite);
  EXPECT_EQ(global.scaling->lastShift(0), global.scaling->lastShift(1));
  for (const auto& g : global.grads)
    for (float v : g) EXPECT_TRUE(std::isfinite(v));
}

// APS reads every rank's every value for its exponents, so the reduction takes its word for
// whether any is NaN or infinite (InputFacts) instead of reading them all again: a NaN or an
// infinity on any rank, in either layer, must still flag the step, in both modes.
TEST(BucketScaling, ApsFlagsANonFiniteValueOnAnyRank) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (auto mode : {precision::ScalingMode::Aps, precision::ScalingMode::Global}) {
    for (const Poison poison : {Poison{0, 5, nan}, Poison{3, 310, -inf}, Poison{2, 299, inf}, Poison{1, 499, nan}}) {
      EXPECT_TRUE(reduce(4, mode, poison).nonFinite)
          << precision::scalingModeName(mode) << " rank " << poison.rank << " index " << poison.index;
    }
    EXPECT_FALSE(reduce(4, mode, Poison{1, 7, 3.0f}).nonFinite) << precision::scalingModeName(mode);
  }
}

// The reduction takes a hook's InputFacts in place of its own pass: told that some input is
// non-finite, it flags finite inputs; told nothing, it looks for itself.
TEST(BucketScaling, TheReductionTakesTheHooksWordOnNonFiniteInputs) {
  for (const std::optional<bool> told : {std::optional<bool>(true), std::optional<bool>()}) {
    SimTransport transport(3);
    std::vector<std::vector<float>> grads(3, std::vector<float>(40, 1.0f));
    std::vector<std::vector<NamedGradient>> named;
    for (auto& g : grads) named.push_back({{"w", {g.data(), 40}}});
    // A hook that tells the reduction whether some input is non-finite, or says nothing.
    struct Teller : ReductionHook {
      std::optional<bool> told;
      void beforeReduce(const BucketContext& c) override {
        ASSERT_NE(c.inputs, nullptr);
        c.inputs->nonFinite = told;
      }
      void afterReduce(const BucketContext& /*c*/) override {}
    } teller;
    teller.told = told;
    ReducerOptions options;
    options.hook = &teller;
    auto codec = std::shared_ptr<const precision::Codec>(precision::makeCodec("e4m3"));
    GradientReducer reducer(transport, std::move(named), {makeAllReduce({}, codec)}, {}, options);
    for (int k = 0; k < 3; ++k) reducer.markReady(0, k);
    EXPECT_EQ(reducer.wait().nonFinite, told.value_or(false));
  }
}

// APS from the maxima markReady measured as it copied (BucketContext::maxAbsBits) scales as
// from its own pass; maxima measured before a hook that changes the values (error feedback's
// compensation) are not used after it.
struct HookRun {
  std::vector<std::vector<float>> data;  // [rank][value] after beforeReduce
  std::vector<int> shifts;
};

HookRun runHooks(bool errorFeedback, const std::vector<uint32_t>* maxAbsBits) {
  const int world = 3;
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  SimTransport transport(world);
  const BucketLayout layout({50, 30}, {0, 0});
  Rng rng(3);
  HookRun r;
  std::vector<float*> pointers;
  for (int k = 0; k < world; ++k) {
    r.data.emplace_back(80);
    for (size_t i = 0; i < 80; ++i)
      r.data.back()[i] = rng.normal() * (i < 50 ? 1e-3f : 50.0f) * static_cast<float>(k + 1);
  }
  for (auto& d : r.data) pointers.push_back(d.data());
  BucketScaling::FormatScaling f = BucketScaling::FormatScaling::forSpec(
      precision::CodecSpec::parse("e4m3"), precision::ScalingMode::Aps, world, errorFeedback);
  BucketScaling scaling({f}, 2, 10, world);
  BucketContext context{0, &layout.buckets()[0], &transport, pointers, 0};
  if (maxAbsBits != nullptr) context.maxAbsBits = *maxAbsBits;
  scaling.beforeReduce(context);
  r.shifts = {scaling.lastShift(0), scaling.lastShift(1)};
  return r;
}

TEST(BucketScaling, ApsTakesTheMaximaMeasuredAsTheGradientsWereCopied) {
  // The measured maxima of runHooks' data: the same generator, copied through copyMaxAbsBits.
  const HookRun own = runHooks(false, nullptr);
  std::vector<uint32_t> measured;
  {
    Rng rng(3);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> g(80), copy(80);
      for (size_t i = 0; i < 80; ++i) g[i] = rng.normal() * (i < 50 ? 1e-3f : 50.0f) * static_cast<float>(k + 1);
      measured.push_back(precision::copyMaxAbsBits(copy.data(), g.data(), 50));
      measured.push_back(precision::copyMaxAbsBits(copy.data() + 50, g.data() + 50, 30));
    }
  }
  const HookRun fromMeasured = runHooks(false, &measured);
  EXPECT_EQ(fromMeasured.shifts, own.shifts);
  EXPECT_EQ(fromMeasured.data, own.data);
  // Maxima that say otherwise are taken at their word: all zero, nothing is shifted.
  const std::vector<uint32_t> zeros(6, 0u);
  EXPECT_EQ(runHooks(false, &zeros).shifts, (std::vector<int>{0, 0}));
  // Error feedback's compensation may change the values before APS reads them (not in a first
  // step, whose residuals are zero): the maxima are dropped, APS reads for itself.
  const HookRun feedback = runHooks(true, nullptr);
  EXPECT_EQ(runHooks(true, &zeros).shifts, feedback.shifts);
  EXPECT_NE(feedback.shifts, (std::vector<int>{0, 0}));
}

// A context with nowhere to leave the shifts (no InputFacts: hooks run outside a reducer)
// gets every rank's buffer scaled in place by its layer's shift.
TEST(BucketScaling, ApsScalesTheBuffersInPlaceWhereTheContextTakesNoShifts) {
  const HookRun run = runHooks(false, nullptr);
  ASSERT_NE(run.shifts[0], 0);
  ASSERT_NE(run.shifts[1], 0);
  const BucketLayout layout({50, 30}, {0, 0});  // runHooks' bucket: each value's parameter
  const BucketLayout::Bucket& bucket = layout.buckets()[0];
  Rng rng(3);  // runHooks' values again
  for (size_t r = 0; r < 3; ++r) {
    for (size_t i = 0; i < 80; ++i) {
      const float g = rng.normal() * (i < 50 ? 1e-3f : 50.0f) * static_cast<float>(r + 1);
      size_t k = 0;
      while (k + 1 < bucket.params.size() && bucket.offsets[k + 1] <= static_cast<int64_t>(i)) ++k;
      const int shift = run.shifts[static_cast<size_t>(bucket.params[k])];
      ASSERT_EQ(run.data[r][i], precision::kernels::scaleByPow2(g, shift)) << "rank " << r << " value " << i;
    }
  }
}

}  // namespace
}  // namespace aps::comm
