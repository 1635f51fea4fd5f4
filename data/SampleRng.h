#pragma once

#include "framework/core/Rng.h"

#include <cstdint>

namespace aps::data {

// What a derived random stream is for; part of its key, so that streams never collide.
enum class RngPurpose : uint64_t { kShuffle = 1, kAugment = 2, kSynthesis = 3 };

// A Philox key that is a pure function of (seed, purpose, a, b): each derived stream
// is independent of how many threads or ranks drew from the others.
uint64_t deriveKey(uint64_t seed, RngPurpose purpose, uint64_t a, uint64_t b);

// The augmentation stream of dataset index `index` in `epoch`: the same bits for a sample
// whichever worker thread, rank or virtual rank loads it.
inline Rng sampleRng(uint64_t seed, uint64_t epoch, uint64_t index) {
  return Rng(deriveKey(seed, RngPurpose::kAugment, epoch, index));
}

}  // namespace aps::data
