// The per-op profile: exclusive times (a scope's time without the scopes inside it), the work
// callers state, and nothing at all while it is off.
#include "framework/core/Profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace aps::profile {
namespace {

void busy(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(Profile, RecordsNothingWhileOff) {
  setEnabled(false);
  reset();
  { const Scope scope("off", 1.0, 2.0); }
  EXPECT_TRUE(totals().empty());
}

TEST(Profile, NestedScopesKeepTheirExclusiveTimeAndStatedWork) {
  reset();
  setEnabled(true);
  for (int i = 0; i < 2; ++i) {
    const Scope outer("outer");
    busy(0.01);
    {
      const Scope inner("inner", 100.0, 8.0);
      busy(0.03);
    }
  }
  setEnabled(false);
  const auto t = totals();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("inner").calls, 2);
  EXPECT_EQ(t.at("inner").flops, 200.0);
  EXPECT_EQ(t.at("inner").bytes, 16.0);
  EXPECT_EQ(t.at("outer").calls, 2);
  EXPECT_EQ(t.at("outer").flops, 0.0);
  // The inner scopes' 60 ms are theirs, not the outer ones' (which keep about 20 ms).
  EXPECT_GE(t.at("inner").seconds, 0.06);
  EXPECT_GE(t.at("outer").seconds, 0.02);
  EXPECT_LT(t.at("outer").seconds, t.at("inner").seconds);
  reset();
  EXPECT_TRUE(totals().empty());
}

TEST(Profile, ScopesOnOtherThreadsNestOnTheirOwn) {
  reset();
  setEnabled(true);
  {
    const Scope main("main");
    std::thread other([] {
      const Scope worker("worker");
      busy(0.02);
    });
    other.join();
  }
  setEnabled(false);
  const auto t = totals();
  // The worker's time is not taken out of the main thread's scope: it ran beside it.
  EXPECT_GE(t.at("worker").seconds, 0.02);
  EXPECT_GE(t.at("main").seconds, 0.02);
}

}  // namespace
}  // namespace aps::profile
