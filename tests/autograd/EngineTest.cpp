#include "framework/autograd/Engine.h"
#include "framework/autograd/Function.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using aps::Tensor;
namespace ag = aps::autograd;

// out = k * x, recorded with a closure (the ops library is not needed for these tests); the
// closure keeps each gradient it returns in `kept`, if given.
Tensor scale(const Tensor& x, float k, std::vector<std::string>* log = nullptr, std::string tag = "",
             std::vector<Tensor>* kept = nullptr) {
  Tensor out = Tensor::empty(x.sizes());
  const auto in = x.toFloatVector();
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = k * in[static_cast<size_t>(i)];
  ag::recordFunction(out, "Scale", {x}, [k, log, tag, kept](const Tensor& g) {
    if (log) log->push_back(tag);
    Tensor gi = Tensor::empty(g.sizes());
    for (int64_t i = 0; i < g.numel(); ++i) gi.data<float>()[i] = k * g.data<float>()[i];
    if (kept) kept->push_back(gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}

// out = a + b (same shapes).
Tensor plus(const Tensor& a, const Tensor& b, std::vector<std::string>* log = nullptr, std::string tag = "") {
  Tensor out = Tensor::empty(a.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) out.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
  ag::recordFunction(out, "Plus", {a, b}, [log, tag](const Tensor& g) {
    if (log) log->push_back(tag);
    return std::vector<Tensor>{g, g};
  });
  return out;
}

TEST(Engine, ChainRuleAndAccumulationAcrossUses) {
  Tensor x = Tensor::fromVector({1.0f, 2.0f}, {2}).setRequiresGrad();
  // y = 3x + 5x (x used twice) -> dy/dx = 8 per element; seed with [1, 2].
  Tensor y = plus(scale(x, 3), scale(x, 5));
  ag::backward(y, Tensor::fromVector({1.0f, 2.0f}, {2}), /*retainGraph=*/true);
  EXPECT_EQ(x.grad().toFloatVector(), (std::vector<float>{8.0f, 16.0f}));
  // A second backward accumulates into .grad.
  ag::backward(y, Tensor::fromVector({1.0f, 1.0f}, {2}));
  EXPECT_EQ(x.grad().toFloatVector(), (std::vector<float>{16.0f, 24.0f}));
  // The graph's saved state is gone now: a third pass is an error, not garbage.
  EXPECT_THROW(ag::backward(y, Tensor::fromVector({1.0f, 1.0f}, {2})), aps::Error);
}

// The engine sums a tensor's gradients from several uses into the first one's buffer only where
// nothing else holds it: a gradient a closure kept, or one passed on to two uses, is not changed.
TEST(Engine, SumsOfGradientsLeaveGradientsHeldElsewhereUnchanged) {
  std::vector<Tensor> kept;
  Tensor x = Tensor::fromVector({1.0f, 2.0f}, {2}).setRequiresGrad();
  Tensor a = scale(x, 5);
  Tensor b = scale(x, 3, nullptr, "", &kept);  // created later, so its gradient reaches x first
  ag::backward(plus(a, b), Tensor::fromVector({1.0f, 2.0f}, {2}));
  EXPECT_EQ(x.grad().toFloatVector(), (std::vector<float>{8.0f, 16.0f}));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].toFloatVector(), (std::vector<float>{3.0f, 6.0f}));
  // plus(c, c) passes one tensor to both of c's uses; a second use of x sums into x's
  // gradient from c's two, which are fresh.
  Tensor w = Tensor::fromVector({1.0f, 2.0f}, {2}).setRequiresGrad();
  Tensor c = scale(w, 2);
  ag::backward(plus(plus(c, c), scale(w, 7)), Tensor::fromVector({1.0f, 1.0f}, {2}));
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{11.0f, 11.0f}));
}

TEST(Engine, RunsInDeterministicReverseTopologicalOrder) {
  std::vector<std::string> log;
  Tensor x = Tensor::ones({1}).setRequiresGrad();
  Tensor a = scale(x, 2, &log, "a");
  Tensor b = scale(a, 2, &log, "b");
  Tensor c = scale(a, 3, &log, "c");
  Tensor d = plus(b, c, &log, "d");
  Tensor e = scale(d, 1, &log, "e");
  ag::backward(e);
  // a waits for both b and c; among ready nodes the later-created one (c) runs first.
  EXPECT_EQ(log, (std::vector<std::string>{"e", "d", "c", "b", "a"}));
  EXPECT_EQ(x.grad().item(), 2.0f * (2.0f + 3.0f));
}

TEST(Engine, GradReadyHookRunsOnceWithTheFinalGradient) {
  Tensor w = Tensor::fromVector({1.0f}, {1}).setRequiresGrad();
  Tensor v = Tensor::fromVector({1.0f}, {1}).setRequiresGrad();
  std::vector<std::pair<std::string, float>> calls;
  ag::addGradReadyHook(w, [&](Tensor& t) { calls.emplace_back("w", t.grad().item()); });
  ag::addGradReadyHook(v, [&](Tensor& t) { calls.emplace_back("v", t.grad().item()); });
  // w feeds three places; its hook must see 2 + 3 + 4 once, not partial sums.
  // (Separate statements: argument evaluation order is unspecified in C++.)
  Tensor w2 = scale(w, 2);
  Tensor w3 = scale(w, 3);
  Tensor left = plus(w2, w3);
  Tensor w4 = scale(w, 4);
  Tensor v7 = scale(v, 7);
  Tensor y = plus(left, plus(w4, v7));
  ag::backward(y);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], (std::pair<std::string, float>{"v", 7.0f}));  // v's path was created last
  EXPECT_EQ(calls[1], (std::pair<std::string, float>{"w", 9.0f}));
}

// A leaf hook that counts ready() calls and records, and takes or declines, what takeFirst
// is offered.
class Taker : public ag::LeafHook {
 public:
  bool take = true;
  int readyCalls = 0;
  std::vector<std::vector<float>> seen;
  void ready(Tensor& /*leaf*/) override { ++readyCalls; }
  bool takeFirst(const Tensor& g) override {
    seen.push_back(g.toFloatVector());
    return take;
  }
};

// A leaf hook is offered the leaf's gradient where it would be written over a zeroed .grad
// (the first of a backward after zeroGradBeforeBackward): taking it leaves .grad's buffer as
// it was (no longer reading as zeros) and runs no ready(); declining it, or a .grad that is
// not pending zero, goes the usual way.
TEST(Engine, ALeafHookTakesOnlyAGradientOverAZeroedGrad) {
  Tensor w = Tensor::fromVector({1.0f, -2.0f}, {2}).setRequiresGrad();
  w.setGrad(Tensor::fromVector({5.0f, 5.0f}, {2}));
  auto hook = std::make_shared<Taker>();
  ag::addLeafHook(w, hook);
  const auto pass = [&] { ag::backward(scale(w, 3), Tensor::fromVector({1.0f, 2.0f}, {2})); };

  w.impl().autograd().gradZeroPending = true;  // what nn::Module::zeroGradBeforeBackward does
  pass();
  ASSERT_EQ(hook->seen.size(), 1u);
  EXPECT_EQ(hook->seen[0], (std::vector<float>{3.0f, 6.0f}));
  EXPECT_EQ(hook->readyCalls, 0);
  EXPECT_FALSE(w.impl().autograd().gradZeroPending);
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{5.0f, 5.0f}));  // untouched, not zeros

  hook->take = false;  // declined: written over the zeros, ready() runs
  w.impl().autograd().gradZeroPending = true;
  pass();
  EXPECT_EQ(hook->seen.size(), 2u);
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{3.0f, 6.0f}));
  EXPECT_EQ(hook->readyCalls, 1);

  hook->take = true;  // not pending zero: accumulated as usual, takeFirst not offered
  pass();
  EXPECT_EQ(hook->seen.size(), 2u);
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{6.0f, 12.0f}));
  EXPECT_EQ(hook->readyCalls, 2);
}

// A second hook on the leaf needs .grad: the gradient is no longer offered, and both hooks
// see it in .grad, in the order they were added.
TEST(Engine, ALeafWithTwoHooksKeepsItsGradient) {
  Tensor w = Tensor::fromVector({1.0f, -2.0f}, {2}).setRequiresGrad();
  w.setGrad(Tensor::fromVector({5.0f, 5.0f}, {2}));
  auto taker = std::make_shared<Taker>();
  ag::addLeafHook(w, taker);
  std::vector<std::vector<float>> later;
  ag::addGradReadyHook(w, [&](Tensor& leaf) {
    EXPECT_EQ(taker->readyCalls, 1);  // the first hook ran first
    later.push_back(leaf.grad().toFloatVector());
  });
  w.impl().autograd().gradZeroPending = true;
  ag::backward(scale(w, 3), Tensor::fromVector({1.0f, 2.0f}, {2}));
  EXPECT_TRUE(taker->seen.empty());
  EXPECT_EQ(taker->readyCalls, 1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0], (std::vector<float>{3.0f, 6.0f}));
}

TEST(Engine, AccumulatesInPlaceIntoAnExistingGradView) {
  Tensor flat = Tensor::zeros({4});
  Tensor w = Tensor::fromVector({1.0f, 1.0f}, {2}).setRequiresGrad();
  w.setGrad(flat.narrow(0, 2, 2));  // a gradient that lives in a flat bucket buffer
  ag::backward(scale(w, 3), Tensor::fromVector({1.0f, 2.0f}, {2}));
  EXPECT_EQ(flat.toFloatVector(), (std::vector<float>{0.0f, 0.0f, 3.0f, 6.0f}));
  EXPECT_TRUE(w.grad().sharesStorage(flat));
}

TEST(Engine, TenThousandDeepChainNeedsNoRecursion) {
  Tensor x = Tensor::fromVector({1.0f}, {1}).setRequiresGrad();
  {
    Tensor y = x;
    for (int i = 0; i < 10000; ++i) y = scale(y, i % 2 == 0 ? 2.0f : 0.5f);
    ag::backward(y);
  }  // the chain is released here, also without recursion
  EXPECT_EQ(x.grad().item(), 1.0f);
}

TEST(Engine, NoGradGuardStopsRecording) {
  Tensor x = Tensor::ones({1}).setRequiresGrad();
  {
    ag::NoGradGuard guard;
    EXPECT_FALSE(ag::GradMode::isEnabled());
    EXPECT_FALSE(scale(x, 2).requiresGrad());
  }
  EXPECT_TRUE(ag::GradMode::isEnabled());
  Tensor y = scale(x, 2);
  EXPECT_TRUE(y.requiresGrad());
  EXPECT_FALSE(y.isLeaf());
  EXPECT_FALSE(scale(Tensor::ones({1}), 2).requiresGrad());
}

TEST(Engine, RejectsBadRoots) {
  Tensor x = Tensor::ones({2}).setRequiresGrad();
  EXPECT_THROW(ag::backward(Tensor::ones({1})), aps::Error);  // does not require grad
  EXPECT_THROW(ag::backward(scale(x, 2)), aps::Error);        // not a scalar, no gradient given
  EXPECT_THROW(ag::backward(scale(x, 2), Tensor::ones({3})), aps::Error);
  Tensor y = scale(x, 2);
  EXPECT_THROW(y.setRequiresGrad(false), aps::Error);  // not a leaf
}

}  // namespace
