#pragma once

#include <cstdint>
#include <string>

namespace aps::train {

// How many CPU threads a rank uses, and why (logged at start-up).
struct ThreadChoice {
  int threads = 1;
  std::string why;
};

// `threads` from the config when set; else OMP_NUM_THREADS when set (a bad value throws,
// naming it); else the node's cores divided by the ranks on the node (at least 1), so that
// mpirun -np 4 on a 16-core node gives each rank 4 threads and never oversubscribes.
ThreadChoice chooseThreads(int64_t configured, int ranksOnNode, const char* ompNumThreads, int cores);
// The same with this process's environment and std::thread::hardware_concurrency().
ThreadChoice chooseThreads(int64_t configured, int ranksOnNode);

}  // namespace aps::train
