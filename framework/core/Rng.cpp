#include "framework/core/Rng.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counterHi, uint64_t counterLo) {
  std::array<uint32_t, 4> block{};
  philox4x32(key, counterHi, counterLo, block.data());
  return block;
}

uint32_t Rng::nextU32() { return philox4x32(state_.seed, 0, state_.offset++)[0]; }

uint64_t Rng::nextU64() {
  const auto block = philox4x32(state_.seed, 0, state_.offset++);
  return (uint64_t{block[1]} << 32) | block[0];
}

float Rng::uniform() { return static_cast<float>(nextU32() >> 8) * 0x1.0p-24f; }

double Rng::uniformDouble() { return static_cast<double>(nextU64() >> 11) * 0x1.0p-53; }

float Rng::normal(float mean, float stddev) {
  const double u1 = 1.0 - uniformDouble();  // (0, 1]
  const double u2 = uniformDouble();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return mean + stddev * static_cast<float>(z);
}

uint64_t Rng::below(uint64_t n) {
  APS_CHECK(n > 0, "Rng::below: n must be positive");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = nextU64();
  } while (x >= limit);
  return x % n;
}

}  // namespace aps
