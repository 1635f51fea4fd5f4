#include "data/SampleRng.h"

namespace aps::data {

uint64_t deriveKey(uint64_t seed, RngPurpose purpose, uint64_t a, uint64_t b) {
  // Two Philox rounds: first mix (seed, purpose, a) into a key, then (key, purpose, b).
  const auto first = philox4x32(seed, static_cast<uint64_t>(purpose), a);
  const uint64_t key = (uint64_t{first[1]} << 32) | first[0];
  const auto second = philox4x32(key, static_cast<uint64_t>(purpose), b);
  return (uint64_t{second[1]} << 32) | second[0];
}

}  // namespace aps::data
