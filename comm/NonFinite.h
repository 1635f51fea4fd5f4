#pragma once

#include <cstdint>
#include <cstring>

namespace aps::comm {

// Whether any of n floats is a NaN or an infinity (exponent bits all ones); branch-free so
// the loop vectorises.
inline bool hasNonFinite(const float* data, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad != 0;
}

}  // namespace aps::comm
