// The vector helpers the convolutions pad rows with: every length from 0 to past two vectors,
// at unaligned addresses, writes exactly its floats and leaves its neighbours alone (the
// masked tail of the AVX-512 and AVX2 paths, the loop of the plain one; the build takes the
// host's).
#include "framework/ops/cpu/Simd.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

namespace simd = aps::cpu::detail::simd;

TEST(Simd, CopyAndFillZeroWriteExactlyTheirRange) {
  for (int64_t n = 0; n <= 2 * simd::kLanes + 9; ++n) {
    std::vector<float> src(96), copied(96, -1.0f), zeroed(96, -1.0f);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
    simd::copy(copied.data() + 3, src.data() + 5, n);
    simd::fillZero(zeroed.data() + 3, n);
    for (int64_t i = 0; i < 96; ++i) {
      const bool inside = i >= 3 && i < 3 + n;
      EXPECT_EQ(copied[static_cast<size_t>(i)], inside ? src[static_cast<size_t>(i + 2)] : -1.0f)
          << "copy of " << n << " at " << i;
      EXPECT_EQ(zeroed[static_cast<size_t>(i)], inside ? 0.0f : -1.0f) << "fillZero of " << n << " at " << i;
    }
  }
}

}  // namespace
