#include "framework/core/Parallel.h"

#include "framework/core/Error.h"

#include <omp.h>

namespace aps {

namespace {
int gThreads = 0;  // 0: not set yet, use OpenMP's default
}

void setNumThreads(int threads) {
  APS_CHECK(threads >= 1, "threads must be >= 1, got {}", threads);
  gThreads = threads;
  omp_set_num_threads(threads);
}

int numThreads() { return gThreads > 0 ? gThreads : omp_get_max_threads(); }

}  // namespace aps
