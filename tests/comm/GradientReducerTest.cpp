// Gradient buckets on simulated ranks: layout, overlap with a fake backward that marks
// gradients ready from another thread, exposed time, multi-step reuse and misuse errors.
#include "comm/GradientReducer.h"
#include "comm/SimTransport.h"
#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "precision/Quantizer.h"
#include "tests/comm/TestCodecs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

namespace aps::comm {
namespace {

using namespace std::chrono_literals;

TEST(BucketLayout, ReverseOrderCapsAndFormats) {
  // 6 parameters of 100 floats (400 bytes); first cap 500 bytes, then 800 bytes.
  const BucketLayout a({100, 100, 100, 100, 100, 100}, {0, 0, 0, 0, 0, 0}, 800, 500);
  ASSERT_EQ(a.buckets().size(), 4u);
  EXPECT_EQ(a.buckets()[0].params, (std::vector<int>{5}));
  EXPECT_EQ(a.buckets()[1].params, (std::vector<int>{4, 3}));
  EXPECT_EQ(a.buckets()[2].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(a.buckets()[3].params, (std::vector<int>{0}));
  EXPECT_EQ(a.buckets()[2].offsets, (std::vector<int64_t>{0, 100}));
  EXPECT_EQ(a.bucketOf(0), 3);
  EXPECT_EQ(a.offsetOf(1), 100);
  EXPECT_EQ(a.buckets()[2].count, 200);

  // A format change closes the bucket; a parameter over the cap gets its own.
  const BucketLayout b({10, 10, 5000, 10}, {1, 1, 0, 0}, 1000, 1000);
  ASSERT_EQ(b.buckets().size(), 3u);
  EXPECT_EQ(b.buckets()[0].params, (std::vector<int>{3}));
  EXPECT_EQ(b.buckets()[1].params, (std::vector<int>{2}));
  EXPECT_EQ(b.buckets()[2].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(b.buckets()[2].format, 1);

  EXPECT_TRUE(BucketLayout({}, {}).buckets().empty());
  EXPECT_THROW(BucketLayout({1, 2}, {0}), Error);
}

// A transport that takes `delay` per round, to make communication visible next to compute.
class SlowTransport final : public Transport {
 public:
  SlowTransport(int world, std::chrono::milliseconds delay) : sim_(world), delay_(delay) {}
  std::string transportName() const override { return "slow-sim"; }
  int worldSize() const override { return sim_.worldSize(); }
  int firstLocalRank() const override { return 0; }
  int localRankCount() const override { return sim_.localRankCount(); }
  void exchange(std::span<const Message> round) override {
    std::this_thread::sleep_for(delay_);
    sim_.exchange(round);
  }

 private:
  SimTransport sim_;
  std::chrono::milliseconds delay_;
};

struct Model {
  // grads[rank][param]
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<int64_t> sizes;

  Model(int ranks, std::vector<int64_t> paramSizes, uint64_t seed) : sizes(std::move(paramSizes)) {
    for (int r = 0; r < ranks; ++r) {
      Rng rng(seed + static_cast<uint64_t>(r));
      std::vector<std::vector<float>> g;
      for (int64_t n : sizes) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = rng.normal();
        g.push_back(std::move(v));
      }
      grads.push_back(std::move(g));
    }
  }
  std::vector<std::vector<NamedGradient>> named() {
    std::vector<std::vector<NamedGradient>> out;
    for (auto& rank : grads) {
      std::vector<NamedGradient> g;
      for (size_t p = 0; p < rank.size(); ++p)
        g.push_back({"layer" + std::to_string(p) + ".weight",
                     {rank[p].data(), static_cast<int64_t>(rank[p].size()), DType::Float32, Device::cpu()}});
      out.push_back(std::move(g));
    }
    return out;
  }
};

// Marks every parameter of every rank ready in reverse registration order, sleeping
// `compute` before each, as backward would.
void fakeBackward(GradientReducer& reducer, int ranks, std::chrono::milliseconds compute) {
  for (int p = reducer.paramCount() - 1; p >= 0; --p) {
    std::this_thread::sleep_for(compute);
    for (int r = 0; r < ranks; ++r) reducer.markReady(p, r);
  }
}

std::shared_ptr<const AllReduceAlgorithm> twoShot() {
  return makeAllReduce({.kind = AllReduceKind::TwoShot}, std::make_shared<testing::Half16Codec>());
}

TEST(GradientReducer, ReducesEveryBucketLikeOneAllReduceOfTheFlatBuffer) {
  const int ranks = 3;
  Model model(ranks, {100, 7, 300, 0, 50, 1}, 1);
  Model reference = model;
  SimTransport sim(ranks);
  GradientReducer reducer(sim, model.named(), {twoShot()}, {}, {.bucketCapBytes = 1600, .firstBucketCapBytes = 400});
  ASSERT_GE(reducer.layout().buckets().size(), 3u);
  std::thread backward([&] { fakeBackward(reducer, ranks, 0ms); });
  backward.join();
  const StepCommStats stats = reducer.wait();
  EXPECT_FALSE(stats.nonFinite);
  EXPECT_EQ(stats.buckets, static_cast<int>(reducer.layout().buckets().size()));
  ASSERT_EQ(stats.bytesSent.size(), static_cast<size_t>(ranks));
  EXPECT_GT(stats.bytesSent[0], 0u);

  // The reference: the same algorithm on each bucket's flat buffer, built by hand.
  const auto algorithm = twoShot();
  for (size_t b = 0; b < reducer.layout().buckets().size(); ++b) {
    const auto& bucket = reducer.layout().buckets()[b];
    std::vector<std::vector<float>> flat(ranks, std::vector<float>(static_cast<size_t>(bucket.count)));
    for (int r = 0; r < ranks; ++r)
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const auto& g = reference.grads[static_cast<size_t>(r)][static_cast<size_t>(bucket.params[k])];
        std::copy(g.begin(), g.end(), flat[static_cast<size_t>(r)].begin() + bucket.offsets[k]);
      }
    std::vector<float*> p;
    for (auto& f : flat) p.push_back(f.data());
    algorithm->run(sim, p, bucket.count, {0, b, 0});  // stream = step 0 * 1000003 + bucket
    for (int r = 0; r < ranks; ++r)
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const auto& got = model.grads[static_cast<size_t>(r)][static_cast<size_t>(bucket.params[k])];
        EXPECT_EQ(0, got.empty()
                         ? 0
                         : std::memcmp(got.data(), flat[0].data() + bucket.offsets[k], got.size() * sizeof(float)))
            << "bucket " << b << " param " << bucket.params[k] << " rank " << r;
      }
  }
}

// The simulator's folding (GradientReducer, "Folding"): two model copies compute the ranks
// in turn (copy c: ranks c, c + 2, ...), as comm.sim_workers does, each marking its
// gradients from its own thread in backward's order, so ranks arrive out of order and are
// staged. The folded sums must be the bits of the unfolded reduction: -0 sums stay -0, a
// NaN is flagged, and the bytes counted are the same. The same where ranks 1, 2, ... hand
// their gradients over from buffers of their own (markReadyFrom, the trainer's gradient
// taker) while the copies' registered buffers hold NaN.
TEST(GradientReducer, FoldedSumsAreTheBitsOfTheUnfoldedOnes) {
  const int ranks = 8, copies = 2;
  const std::vector<int64_t> sizes{300, 7, 1000, 64, 5, 0};
  for (const std::string spec : {"fp32", "native"}) {
    const std::shared_ptr<const AllReduceAlgorithm> algorithm =
        spec == "native" ? makeAllReduce({.kind = AllReduceKind::Native}, nullptr)
                         : makeAllReduce({.kind = AllReduceKind::TwoShot}, precision::makeCodec("fp32"));
    // Each step's gradients: [step][rank][param].
    std::vector<std::vector<std::vector<std::vector<float>>>> steps;
    for (uint64_t step = 0; step < 3; ++step) {
      Model m(ranks, sizes, 100 + step);
      for (int r = 0; r < ranks; ++r) m.grads[static_cast<size_t>(r)][2][11] = -0.0f;
      if (step == 1) m.grads[5][2][3] = std::numeric_limits<float>::quiet_NaN();
      steps.push_back(m.grads);
    }
    struct Run {
      std::vector<std::vector<std::vector<float>>> result;  // [copy][param]
      std::vector<StepCommStats> stats;
      std::vector<bool> folds;
    };
    const auto run = [&](bool hooks, bool handOver = false) {
      SimTransport sim(ranks);
      Model copyGrads(copies, sizes, 0);
      std::vector<std::vector<NamedGradient>> named;
      const auto perCopy = copyGrads.named();
      for (int r = 0; r < ranks; ++r) named.push_back(perCopy[static_cast<size_t>(r % copies)]);
      ReducerOptions options{.bucketCapBytes = 2000, .firstBucketCapBytes = 100};
      options.average = true;
      // A hook that does nothing, but may read the buffers: no folding.
      struct Idle : ReductionHook {
        void beforeReduce(const BucketContext& /*c*/) override {}
        void afterReduce(const BucketContext& /*c*/) override {}
      } idle;
      if (hooks) options.hook = &idle;
      GradientReducer reducer(sim, std::move(named), {algorithm}, {}, options);
      Run out;
      for (size_t b = 0; b < reducer.layout().buckets().size(); ++b)
        out.folds.push_back(reducer.foldsBucket(static_cast<int>(b)));
      for (const auto& grads : steps) {
        std::vector<std::thread> workers;
        for (int c = 0; c < copies; ++c) {
          workers.emplace_back([&, c] {
            for (int r = c; r < ranks; r += copies) {
              for (size_t p = 0; p < sizes.size(); ++p) {
                auto& registered = copyGrads.grads[static_cast<size_t>(c)][p];
                if (handOver && r > 0) {
                  std::fill(registered.begin(), registered.end(), std::numeric_limits<float>::quiet_NaN());
                } else {
                  registered = grads[r][p];
                }
              }
              for (int p = static_cast<int>(sizes.size()) - 1; p >= 0; --p) {
                if ((r + p) % 3 == 0) std::this_thread::yield();
                if (handOver) {
                  const bool taken = reducer.markReadyFrom(p, r, grads[r][static_cast<size_t>(p)].data());
                  EXPECT_EQ(taken, r > 0);
                  if (taken) continue;
                }
                reducer.markReady(p, r);
              }
            }
          });
        }
        for (auto& w : workers) w.join();
        out.stats.push_back(reducer.wait());
      }
      out.result = copyGrads.grads;
      return out;
    };
    const Run folded = run(false), plain = run(true), handed = run(false, true);
    ASSERT_FALSE(folded.folds.empty());
    for (size_t b = 0; b < folded.folds.size(); ++b) {
      EXPECT_TRUE(folded.folds[b]) << spec << " bucket " << b;
      EXPECT_FALSE(plain.folds[b]) << spec << " bucket " << b;
    }
    for (size_t step = 0; step < steps.size(); ++step) {
      EXPECT_EQ(folded.stats[step].nonFinite, step == 1) << spec;
      EXPECT_EQ(plain.stats[step].nonFinite, step == 1) << spec;
      EXPECT_EQ(folded.stats[step].bytesSent, plain.stats[step].bytesSent) << spec;
      EXPECT_EQ(handed.stats[step].nonFinite, step == 1) << spec;
      EXPECT_EQ(handed.stats[step].bytesSent, plain.stats[step].bytesSent) << spec;
    }
    for (int c = 0; c < copies; ++c) {
      for (size_t p = 0; p < sizes.size(); ++p) {
        const auto& got = folded.result[static_cast<size_t>(c)][p];
        const auto& want = plain.result[static_cast<size_t>(c)][p];
        const auto& gotHanded = handed.result[static_cast<size_t>(c)][p];
        ASSERT_EQ(got.size(), want.size());
        ASSERT_EQ(gotHanded.size(), want.size());
        EXPECT_EQ(0, got.empty() ? 0 : std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << spec << " copy " << c << " param " << p;
        EXPECT_EQ(0, got.empty() ? 0 : std::memcmp(gotHanded.data(), want.data(), got.size() * sizeof(float)))
            << spec << " handed over: copy " << c << " param " << p;
      }
      EXPECT_TRUE(std::signbit(folded.result[static_cast<size_t>(c)][2][11])) << spec << ": a sum of -0 is -0";
    }
  }
}

TEST(GradientReducer, OverlapStartsBeforeBackwardEnds) {
  const int ranks = 2;
  Model model(ranks, {64, 64, 64, 64}, 2);
  SimTransport sim(ranks);
  GradientReducer reducer(sim, model.named(), {twoShot()}, {}, {.bucketCapBytes = 256, .firstBucketCapBytes = 256});
  ASSERT_EQ(reducer.layout().buckets().size(), 4u);
  // Backward has produced only the last parameter's gradient (bucket 0) so far.
  for (int r = 0; r < ranks; ++r) reducer.markReady(3, r);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reducer.bucketsReduced() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(reducer.bucketsReduced(), 1);
  for (int p = 2; p >= 0; --p)
    for (int r = 0; r < ranks; ++r) reducer.markReady(p, r);
  reducer.wait();
  EXPECT_EQ(reducer.bucketsReduced(), 0) << "wait() starts the next step";
}

TEST(GradientReducer, WithoutOverlapNothingMovesBeforeWait) {
  const int ranks = 2;
  Model model(ranks, {64, 64}, 3), reference = model;
  SimTransport sim(ranks);
  GradientReducer reducer(sim, model.named(), {twoShot()}, {},
                          {.bucketCapBytes = 256, .firstBucketCapBytes = 256, .overlap = false});
  fakeBackward(reducer, ranks, 0ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(reducer.bucketsReduced(), 0);
  reducer.wait();
  // Same bits as the overlapped reducer.
  GradientReducer overlapped(sim, reference.named(), {twoShot()}, {},
                             {.bucketCapBytes = 256, .firstBucketCapBytes = 256});
  fakeBackward(overlapped, ranks, 0ms);
  overlapped.wait();
  for (int r = 0; r < ranks; ++r)
    for (size_t p = 0; p < 2; ++p) EXPECT_EQ(model.grads[r][p], reference.grads[r][p]);
}

TEST(GradientReducer, OverlapHidesCommunicationBehindBackward) {
  // Each bucket costs 3 rounds x 15 ms (flag, all-to-all, all-gather); backward spends 60 ms
  // per parameter, so with overlap only the last bucket's ~45 ms is exposed.
  const int ranks = 2;
  Model model(ranks, {32, 32, 32, 32}, 4);
  SlowTransport slow(ranks, 15ms);
  ReducerOptions options{.bucketCapBytes = 128, .firstBucketCapBytes = 128};
  GradientReducer overlapped(slow, model.named(), {twoShot()}, {}, options);
  std::thread backward([&] { fakeBackward(overlapped, ranks, 60ms); });
  backward.join();
  const StepCommStats hidden = overlapped.wait();

  options.overlap = false;
  GradientReducer serial(slow, model.named(), {twoShot()}, {}, options);
  fakeBackward(serial, ranks, 60ms);
  const StepCommStats exposed = serial.wait();

  EXPECT_GE(exposed.exposedSeconds, 4 * 3 * 0.015);
  EXPECT_GE(exposed.exposedSeconds, 0.95 * exposed.commSeconds);
  EXPECT_LT(hidden.exposedSeconds, 0.5 * hidden.commSeconds);
}

TEST(GradientReducer, ManyStepsAverage) {
  const int ranks = 4;
  Model model(ranks, {10, 20, 30}, 5);
  SimTransport sim(ranks);
  auto native = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({.kind = AllReduceKind::Native}, nullptr));
  GradientReducer reducer(sim, model.named(), {native}, {}, {.average = true});
  for (int step = 0; step < 3; ++step) {
    // The gradients are copied into the bucket at markReady and the mean is copied back.
    std::vector<double> expected(20, 0.0);
    for (int r = 0; r < ranks; ++r) {
      for (int i = 0; i < 20; ++i) {
        model.grads[static_cast<size_t>(r)][1][static_cast<size_t>(i)] = static_cast<float>(r + i + step);
        expected[static_cast<size_t>(i)] += (r + i + step) / static_cast<double>(ranks);
      }
    }
    fakeBackward(reducer, ranks, 0ms);
    const StepCommStats stats = reducer.wait();
    EXPECT_FALSE(stats.nonFinite);
    for (int r = 0; r < ranks; ++r)
      for (int i = 0; i < 20; ++i)
        EXPECT_FLOAT_EQ(model.grads[static_cast<size_t>(r)][1][static_cast<size_t>(i)],
                        static_cast<float>(expected[static_cast<size_t>(i)]));
  }
}

// precision.pre_divide (the APS artifact): every rank quantizes g / N and the owners sum those;
// no division after. The default divides the sum of the quantized g instead: other bits.
TEST(GradientReducer, PreDivideQuantizesTheDividedGradients) {
  const int ranks = 4;
  const int64_t n = 64;
  const precision::Quantizer e4m3(precision::FloatFormat::preset("e4m3"));
  const auto algorithm = std::shared_ptr<const AllReduceAlgorithm>(
      makeAllReduce({.kind = AllReduceKind::AllGather, .roundEveryAdd = false}, precision::makeCodec("e4m3")));
  auto run = [&](bool preDivide) {
    Model model(ranks, {n}, 11);
    std::vector<float*> data;
    for (auto& g : model.grads) data.push_back(g[0].data());
    SimTransport sim(ranks);
    const BucketLayout::Bucket bucket{{0}, {0}, n, 0};
    reduceBucket(*algorithm, {0, &bucket, &sim, data, 0}, {.average = true, .preDivide = preDivide});
    return model.grads[0][0];
  };
  Model inputs(ranks, {n}, 11);
  for (int64_t i = 0; i < n; ++i) {
    float divided = 0.0f, summed = 0.0f;  // allgather without rounding after adds: fp32 sums in rank order
    for (int r = 0; r < ranks; ++r) {
      const float g = inputs.grads[static_cast<size_t>(r)][0][static_cast<size_t>(i)];
      divided += e4m3.quantize(g / static_cast<float>(ranks), precision::RoundingMode::NearestEven);
      summed += e4m3.quantize(g, precision::RoundingMode::NearestEven);
    }
    EXPECT_EQ(run(true)[static_cast<size_t>(i)], divided) << i;
    EXPECT_EQ(run(false)[static_cast<size_t>(i)], summed / static_cast<float>(ranks)) << i;
  }
  EXPECT_NE(run(true), run(false));
}

TEST(GradientReducer, NonFiniteGradientIsReportedForTheStep) {
  const int ranks = 3;
  Model model(ranks, {16, 16}, 6);
  model.grads[1][0][3] = std::numeric_limits<float>::quiet_NaN();
  SimTransport sim(ranks);
  GradientReducer reducer(sim, model.named(), {twoShot()});
  fakeBackward(reducer, ranks, 0ms);
  EXPECT_TRUE(reducer.wait().nonFinite);
}

TEST(GradientReducer, MisuseNamesTheParameter) {
  Model model(2, {8, 8}, 7);
  SimTransport sim(2);
  GradientReducer reducer(sim, model.named(), {twoShot()});
  reducer.markReady(1, 0);
  EXPECT_THROW(reducer.markReady(1, 0), Error);
  try {
    reducer.wait();
    ADD_FAILURE() << "wait() with unmarked gradients must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reducer.markReady(2, 0), Error);
  auto bad = model.named();
  bad[1][0].name = "other";
  EXPECT_THROW(GradientReducer(sim, bad, {twoShot()}), Error);
  EXPECT_THROW(GradientReducer(sim, model.named(), {twoShot()}, {0, 1}), Error) << "format 1 has no algorithm";
}

TEST(SmallAllReduce, SumMaxMinInRankOrder) {
  SimTransport sim(3);
  std::vector<std::vector<float>> v{{1.0f, -5.0f, 0.5f}, {2.0f, 7.0f, -0.5f}, {-4.0f, 1.0f, 0.25f}};
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    auto data = v;
    std::vector<float*> p{data[0].data(), data[1].data(), data[2].data()};
    smallAllReduce(sim, p, 3, op);
    const std::vector<float> expected = op == ReduceOp::Sum   ? std::vector<float>{-1.0f, 3.0f, 0.25f}
                                        : op == ReduceOp::Max ? std::vector<float>{2.0f, 7.0f, 0.5f}
                                                              : std::vector<float>{-4.0f, -5.0f, -0.5f};
    for (const auto& d : data) EXPECT_EQ(d, expected) << reduceOpName(op);
  }
}

TEST(GradientReducer, HooksRunAroundEachBucketOnTheCommThread) {
  // An APS-like hook: agree on max|g| per bucket, scale by a power of two before the
  // reduction and undo it after. Power-of-two scaling is exact in fp32, so the bits equal
  // those of a reducer without hooks.
  const int ranks = 3;
  Model plain(ranks, {40, 40, 40}, 9), scaled = plain;
  SimTransport sim(ranks);
  auto native = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({.kind = AllReduceKind::Native}, nullptr));
  struct PowerOfTwo : ReductionHook {
    int ranks = 0, before = 0, after = 0;
    void beforeReduce(const BucketContext& c) override {
      ++before;
      std::vector<float> maxAbs(static_cast<size_t>(ranks), 0.0f);
      std::vector<float*> p;
      for (size_t i = 0; i < c.data.size(); ++i) {
        for (int64_t k = 0; k < c.layout->count; ++k) maxAbs[i] = std::max(maxAbs[i], std::fabs(c.data[i][k]));
        p.push_back(&maxAbs[i]);
      }
      smallAllReduce(*c.transport, p, 1, ReduceOp::Max);
      for (size_t i = 1; i < maxAbs.size(); ++i) EXPECT_EQ(maxAbs[i], maxAbs[0]);
      for (float* d : c.data)
        for (int64_t k = 0; k < c.layout->count; ++k) d[k] = std::ldexp(d[k], 4);
    }
    void afterReduce(const BucketContext& c) override {
      ++after;
      for (float* d : c.data)
        for (int64_t k = 0; k < c.layout->count; ++k) d[k] = std::ldexp(d[k], -4);
    }
  } hook;
  hook.ranks = ranks;
  ReducerOptions options{.bucketCapBytes = 160, .firstBucketCapBytes = 160};
  options.hook = &hook;
  GradientReducer withHooks(sim, scaled.named(), {native}, {}, options);
  GradientReducer without(sim, plain.named(), {native}, {}, {.bucketCapBytes = 160, .firstBucketCapBytes = 160});
  fakeBackward(withHooks, ranks, 0ms);
  fakeBackward(without, ranks, 0ms);
  withHooks.wait();
  without.wait();
  EXPECT_EQ(hook.before, 3);
  EXPECT_EQ(hook.after, 3);
  for (int r = 0; r < ranks; ++r)
    for (size_t p = 0; p < 3; ++p) EXPECT_EQ(scaled.grads[r][p], plain.grads[r][p]);
}

TEST(GradientReducer, OneFormatPerBucket) {
  const int ranks = 2;
  Model model(ranks, {8, 8, 8}, 8);
  SimTransport sim(ranks);
  auto native = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({.kind = AllReduceKind::Native}, nullptr));
  GradientReducer reducer(sim, model.named(), {native, twoShot()}, {0, 1, 1});
  ASSERT_EQ(reducer.layout().buckets().size(), 2u);
  fakeBackward(reducer, ranks, 0ms);
  const StepCommStats stats = reducer.wait();
  // fp32 bucket: 8 values, 4 per chunk; 16-bit bucket: 16 values, 8 per chunk. Each sends
  // its one remote chunk twice; the 16-bit bucket adds a flag byte (an fp32 result flags its
  // non-finite inputs itself).
  EXPECT_EQ(stats.bytesSent[0], (2u * 16u) + (2u * 16u + 1u));
}

}  // namespace
}  // namespace aps::comm
