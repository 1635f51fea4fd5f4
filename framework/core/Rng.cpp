#include "framework/core/Rng.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t{a} * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counterHi, uint64_t counterLo) {
  uint32_t c0 = static_cast<uint32_t>(counterLo), c1 = static_cast<uint32_t>(counterLo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counterHi), c3 = static_cast<uint32_t>(counterHi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n1 = lo1;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    const uint32_t n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

uint32_t randomBits32(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32(seed, stream, index)[0];
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
