#pragma once

#include "framework/tensor/Tensor.h"

#include <cstdint>

namespace aps::ops {

// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// Element i is dropped when Philox(seed, stream, i) falls below p, so a (seed, stream) pair
// gives the same mask on any thread count and after a resume. Identity when !training.
Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream);

}  // namespace aps::ops
