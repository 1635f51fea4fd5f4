#pragma once

// Rank r's input to a test all-reduce: N(0, (1 + r)^2) values from its own seeded stream, so
// that any process can regenerate any rank's (the simulated world beside real ranks).
#include "framework/core/Rng.h"

#include <cstdint>
#include <vector>

namespace aps::comm::testing {

inline std::vector<float> inputOf(int rank, int64_t n, uint64_t seed) {
  Rng rng(seed * 7919 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal(0.0f, 1.0f + static_cast<float>(rank));
  return v;
}

}  // namespace aps::comm::testing
