#pragma once

#include "framework/core/Philox.h"

#include <array>
#include <cstdint>

namespace aps {

// Philox4x32-10 as an array (the arithmetic and randomBits32, the stateless draw of one
// element's bits, are in framework/core/Philox.h, shared with the CUDA kernels).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counterHi, uint64_t counterLo);

// A sequential generator on top of Philox whose whole state is (seed, offset), so it
// can be checkpointed and restored exactly.
class Rng {
 public:
  struct State {
    uint64_t seed = 0;
    uint64_t offset = 0;
  };

  explicit Rng(uint64_t seed = 0) : state_{seed, 0} {}

  uint32_t nextU32();
  uint64_t nextU64();
  float uniform();                                       // [0, 1)
  double uniformDouble();                                // [0, 1)
  float normal(float mean = 0.0f, float stddev = 1.0f);  // Box-Muller
  uint64_t below(uint64_t n);                            // uniform in [0, n), unbiased

  State state() const { return state_; }
  void setState(State s) { state_ = s; }

 private:
  State state_;
};

}  // namespace aps
