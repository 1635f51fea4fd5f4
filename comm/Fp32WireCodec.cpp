#include "comm/Fp32WireCodec.h"

#include <cstring>

namespace aps::comm {

size_t Fp32WireCodec::encodedBytes(int64_t n) const { return static_cast<size_t>(n) * sizeof(float); }

void Fp32WireCodec::encode(const float* in, int64_t n, uint8_t* out, const precision::EncodeContext&) const {
  if (n > 0) std::memcpy(out, in, encodedBytes(n));
}

void Fp32WireCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  if (n > 0) std::memcpy(out, in, encodedBytes(n));
}

void Fp32WireCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  // Byte buffers carry no float alignment guarantee; memcpy per element compiles to loads.
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, in + i * 4, sizeof v);
    acc[i] += v;
  }
}

void Fp32WireCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                    const precision::EncodeContext&) const {
  for (int64_t i = 0; i < n; ++i) {
    float x, y;
    std::memcpy(&x, a + i * 4, sizeof x);
    std::memcpy(&y, b + i * 4, sizeof y);
    const float s = x + y;
    std::memcpy(out + i * 4, &s, sizeof s);
  }
}

}  // namespace aps::comm
