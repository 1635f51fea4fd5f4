#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <utility>
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

// forEachTask runs each task once; its thread index stays below the thread count (the kernels
// index per-thread buffers by it); one thread runs the tasks in order on the calling thread.
TEST(Parallel, ForEachTaskRunsEveryTaskOnceWithAThreadIndexInRange) {
  for (int threads : {1, 2, 3}) {
    for (int64_t tasks : {0, 1, 2, 5, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
      std::atomic<int> outOfRange{0};
      aps::forEachTask(tasks, threads, [&](int64_t task, int thread) {
        hits[static_cast<size_t>(task)]++;
        if (thread < 0 || thread >= threads) outOfRange++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1) << threads << " threads, " << tasks << " tasks";
      EXPECT_EQ(outOfRange.load(), 0) << threads << " threads, " << tasks << " tasks";
    }
  }
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int64_t> order;
  bool elsewhere = false;
  aps::forEachTask(6, 1, [&](int64_t task, int) {
    order.push_back(task);
    elsewhere = elsewhere || std::this_thread::get_id() != caller;
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(elsewhere);
}

TEST(Parallel, RejectsZeroThreads) {
  EXPECT_THROW(aps::setNumThreads(0), aps::Error);
  EXPECT_THROW(aps::ThreadCountGuard(0), aps::Error);
}

// A guard sets the count of its own thread only, nests, and restores the count on exit.
TEST(Parallel, ThreadCountGuardIsPerThreadAndRestores) {
  aps::setNumThreads(3);
  {
    aps::ThreadCountGuard one(1);
    EXPECT_EQ(aps::numThreads(), 1);
    int elsewhere = 0;
    std::thread([&] { elsewhere = aps::numThreads(); }).join();
    EXPECT_EQ(elsewhere, 3);
    {
      aps::ThreadCountGuard two(2);
      EXPECT_EQ(aps::numThreads(), 2);
    }
    EXPECT_EQ(aps::numThreads(), 1);
    // parallelFor under the guard runs the whole range as one chunk on this thread.
    std::vector<std::pair<int64_t, int64_t>> chunks;
    aps::parallelFor(100, 1, [&](int64_t b, int64_t e) { chunks.emplace_back(b, e); });
    EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 100}}));
  }
  EXPECT_EQ(aps::numThreads(), 3);
}

}  // namespace
