#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace {

TEST(Parallel, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    aps::setNumThreads(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      aps::parallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(Parallel, RejectsZeroThreads) { EXPECT_THROW(aps::setNumThreads(0), aps::Error); }

}  // namespace
