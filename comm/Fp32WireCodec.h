#pragma once

#include "precision/Codec.h"

namespace aps::comm {

// Raw little-endian fp32 on the wire: the baseline `native` all-reduce sends through the
// same schedule as the low-precision algorithms, so its fixed summation order (and thus
// its bits) is the same for real and simulated ranks, unlike MPI_Allreduce whose order is
// implementation-defined.
class Fp32WireCodec final : public precision::Codec {
 public:
  std::string name() const override { return "fp32"; }
  size_t encodedBytes(int64_t n) const override;
  void encode(const float* in, int64_t n, uint8_t* out, const precision::EncodeContext& ctx = {}) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const precision::EncodeContext& ctx = {}) const override;
  // A copy, so any cut keeps every value; multiples of FloatCodec's 64 also keep which of the
  // vectorised or scalar adds a value takes (the sign of a sum of two NaNs may depend on it).
  int64_t splitGranule() const override { return 64; }
  bool encodesFp32Bits() const override { return true; }
};

}  // namespace aps::comm
