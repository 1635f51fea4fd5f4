#include "framework/core/Parallel.h"

#include "framework/core/Error.h"

#include <omp.h>

namespace aps {

namespace {
int gThreads = 0;               // 0: not set yet, use OpenMP's default
thread_local int tThreads = 0;  // a ThreadCountGuard's count in this thread; 0: none
}  // namespace

void setNumThreads(int threads) {
  APS_CHECK(threads >= 1, "threads must be >= 1, got {}", threads);
  gThreads = threads;
  omp_set_num_threads(threads);
}

int numThreads() {
  if (tThreads > 0) return tThreads;
  return gThreads > 0 ? gThreads : omp_get_max_threads();
}

int teamThreadIndex() { return omp_get_thread_num(); }

ThreadCountGuard::ThreadCountGuard(int threads) : previous_(tThreads) {
  APS_CHECK(threads >= 1, "threads must be >= 1, got {}", threads);
  tThreads = threads;
}

ThreadCountGuard::~ThreadCountGuard() { tThreads = previous_; }

}  // namespace aps
