#pragma once

#include <cstdint>
#include <exception>
#include <mutex>

namespace aps {

// The number of worker threads every CPU kernel uses (OpenMP). Results are bit-for-bit
// reproducible for a given thread count; kernels split work over output elements and
// reduce in fixed-size blocks so that most results do not depend on it at all.
void setNumThreads(int threads);
int numThreads();

// Within the calling thread, kernels use `threads` threads until the guard ends; other threads
// keep the process's count. For simulated ranks that run side by side, one thread each: no
// kernel's bits depend on the thread count, so each rank computes what it would alone.
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int threads);
  ~ThreadCountGuard();
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int previous_;
};

// Runs fn(begin, end) over [0, n) split into contiguous static chunks, one per thread
// (never smaller than grain). The split depends only on n, grain and the thread count.
template <typename Fn>
void parallelFor(int64_t n, int64_t grain, const Fn& fn) {
  if (n <= 0) return;
  const int64_t threads = numThreads();
  int64_t chunks = grain > 0 ? (n + grain - 1) / grain : n;
  if (chunks > threads) chunks = threads;
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

// The index of the calling thread in its OpenMP team (0 outside a parallel region).
int teamThreadIndex();

// Runs fn(task, thread) for every task in [0, tasks) on at most `threads` threads, each task
// taken by the next free thread; thread (0 <= thread < threads) indexes per-thread buffers.
// With one thread (or one task) the tasks run in order on the calling thread without entering
// OpenMP: a team of one still costs a parallel region's set-up and a futex wake, which at one
// image per simulated rank came to 8% of a ResNet-20 step (aps_bench_train --batch 1).
template <typename Fn>
void forEachTask(int64_t tasks, int threads, const Fn& fn) {
  if (tasks <= 0) return;
  if (threads <= 1 || tasks == 1) {
    for (int64_t task = 0; task < tasks; ++task) fn(task, 0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t task = 0; task < tasks; ++task) fn(task, teamThreadIndex());
}

// parallelFor for a fn that may throw: the first exception caught is rethrown on the calling
// thread once every chunk has finished (an exception may not leave an OpenMP region).
template <typename Fn>
void parallelForRethrowing(int64_t n, int64_t grain, const Fn& fn) {
  std::mutex mutex;
  std::exception_ptr first;
  parallelFor(n, grain, [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = std::current_exception();
    }
  });
  if (first) std::rethrow_exception(first);
}

}  // namespace aps
