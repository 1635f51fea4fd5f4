// Model tests check values, not speed, and run on one thread: on a shared, oversubscribed
// machine OpenMP workers spin-waiting for a descheduled peer make a two-thread step tens of
// times slower than a one-thread step. The tools these tests start inherit the setting.
#include "framework/core/Parallel.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

class OneThread : public ::testing::Environment {
 public:
  void SetUp() override {
    aps::setNumThreads(1);
    setenv("OMP_NUM_THREADS", "1", 1);
  }
};

[[maybe_unused]] ::testing::Environment* const kOneThread = ::testing::AddGlobalTestEnvironment(new OneThread);

}  // namespace
