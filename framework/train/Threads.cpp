#include "framework/train/Threads.h"

#include "framework/core/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace aps::train {

ThreadChoice chooseThreads(int64_t configured, int ranksOnNode, const char* ompNumThreads, int cores) {
  if (configured > 0) return {static_cast<int>(configured), "threads in the config"};
  if (ompNumThreads != nullptr && *ompNumThreads != '\0') {
    char* end = nullptr;
    const long v = std::strtol(ompNumThreads, &end, 10);
    APS_CHECK(*end == '\0' && v > 0 && v <= 1024, "OMP_NUM_THREADS = '{}' is not a thread count in 1..1024",
              ompNumThreads);
    return {static_cast<int>(v), "OMP_NUM_THREADS"};
  }
  const int share = std::max(1, std::max(cores, 1) / std::max(ranksOnNode, 1));
  return {share,
          fmt::format("{} cores of the node / {} rank{} on it", cores, ranksOnNode, ranksOnNode == 1 ? "" : "s")};
}

ThreadChoice chooseThreads(int64_t configured, int ranksOnNode) {
  return chooseThreads(configured, ranksOnNode, std::getenv("OMP_NUM_THREADS"),
                       static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace aps::train
