#pragma once

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) as
// shared host-device arithmetic (framework/core/HostDevice.h): a counter-based generator, so
// block i of stream (key) k is a pure function of (k, i) and any thread of any kernel, CPU or
// GPU, draws the random bits of element i and gets the same bits.

#include "framework/core/HostDevice.h"

#include <cstdint>

namespace aps {

namespace philox {
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;
}  // namespace philox

// out[0..3] = Philox4x32-10 of the 128-bit counter (counterHi, counterLo) under `key`.
APS_HOST_DEVICE inline void philox4x32(uint64_t key, uint64_t counterHi, uint64_t counterLo, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(counterLo), c1 = static_cast<uint32_t>(counterLo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counterHi), c3 = static_cast<uint32_t>(counterHi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{philox::kMul0} * c0;
    const uint64_t p1 = uint64_t{philox::kMul1} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += philox::kWeyl0;
    k1 += philox::kWeyl1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Random bits for element `index` of draw `stream` under `seed` (stateless): word index % 4 of
// the Philox block at counter (stream, index / 4). One block serves four consecutive elements,
// as a counter-based generator is meant to be used (curand does the same), so drawing the bits
// of n elements costs n / 4 blocks.
APS_HOST_DEVICE inline uint32_t randomBits32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t block[4];
  philox4x32(seed, stream, index >> 2, block);
  return block[index & 3];
}

}  // namespace aps
