#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aps::precision {

// Where an encode call draws its random bits from (stochastic rounding). Element i of a
// call uses randomBits32(seed, stream, offset + i) (framework/core/Rng.h), so the bits do
// not depend on how a buffer is split into chunks or over threads.
struct EncodeContext {
  uint64_t seed = 0;
  uint64_t stream = 0;
  int64_t offset = 0;
};

// A wire codec: turns fp32 values into the bytes that travel between ranks and back.
// The contract between precision/ (which implements codecs) and comm/ (which moves
// their bytes). Every method is deterministic and thread-count independent.
class Codec {
 public:
  virtual ~Codec() = default;

  // A short name for logs and metrics ("e4m3", "dettmers_dynamic/block256", ...).
  virtual std::string name() const = 0;

  // Bytes that n values occupy on the wire, headers (e.g. absmax scales) included.
  // An encoded chunk of n values is self-contained: it decodes without its neighbours.
  virtual size_t encodedBytes(int64_t n) const = 0;

  // out[0, encodedBytes(n)) <- encode(in[0, n))
  virtual void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}) const = 0;

  // out[0, n) <- decode(in)
  virtual void decode(const uint8_t* in, int64_t n, float* out) const = 0;

  // acc[i] += decode(in)[i], in fp32.
  virtual void decodeAdd(const uint8_t* in, int64_t n, float* acc) const = 0;

  // acc[i] = decode(encode(in))[i] (add false) or acc[i] += it (add true), in fp32: the bits
  // of encode(in, n, scratch, ctx) followed by decode or decodeAdd(scratch, n, acc), NaNs
  // included. `scratch` holds encodedBytes(n) bytes; a codec that rounds to its values without
  // forming codes may leave it untouched. The simulator's owners add each sender's values this
  // way (two_shot).
  virtual void roundTripInto(const float* in, int64_t n, float* acc, bool add, uint8_t* scratch,
                             const EncodeContext& ctx = {}) const {
    encode(in, n, scratch, ctx);
    if (add) {
      decodeAdd(scratch, n, acc);
    } else {
      decode(scratch, n, acc);
    }
  }

  // Whether encode rounds every value to the nearest of its format's values with at most 5
  // mantissa bits, above fp32's subnormals: then a sticky 16-bit key of a value
  // (precision::copyMaxAbsBitsSticky16), widened and scaled by any power of two, encodes to
  // the same code as the value scaled alike.
  virtual bool roundsSticky16Exactly() const { return false; }
  // roundTripInto (nearest rounding, no context) of such keys widened (widenSticky16) and
  // scaled by 2^shift (scaleByPowerOfTwo), with the widening and the scaling done in registers
  // as the values are rounded: the same bits as widening, scaling, then roundTripInto. Returns
  // false, having done nothing, where the codec cannot (the caller then takes those steps).
  virtual bool roundTripKeysInto(const uint16_t* /*keys*/, int64_t /*n*/, int /*shift*/, float* /*acc*/,
                                 bool /*add*/) const {
    return false;
  }

  // One reduction hop, fused so each byte is read and written once:
  // out <- encode(decode(a) + decode(b)), the sum taken in fp32. `out` may alias `a` or `b`.
  virtual void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                               const EncodeContext& ctx = {}) const = 0;

  // Where an encoding may be cut into independent pieces without changing what it carries:
  // g > 0 promises that for any n values cut at multiples of g (counted from the first
  // value), encoding each piece on its own, piece p with ctx.offset advanced by its start,
  // gives pieces whose encodedBytes add up to encodedBytes(n) and which decode (and
  // decodeAdd) to exactly the values the whole encoding decodes to. 0 (the default): no such
  // promise, the encoding is one piece. Pipelined all-reduces (two_shot) cut their chunks
  // into segments at multiples of this; a codec whose scales or statistics span the whole
  // call (one absmax per chunk) must return 0.
  virtual int64_t splitGranule() const { return 0; }

  // Whether roundTripInto and decodeAdd give each value the same bits wherever a call is cut
  // (piece p with ctx.offset advanced by its start), NaN signs included: whichever path (vector
  // step, masked last step, scalar code) a value takes in a piece, it rounds and adds alike.
  // The simulator's owners then round a run of consecutive owners' values in one call
  // (two_shot). false (the default): no such promise.
  virtual bool roundTripsAlikeAtAnyCut() const { return false; }

  // Whether encode writes each value's fp32 bits unchanged, little endian, but for the
  // payload of a NaN (it keeps the sign): fp32 itself. A sum of such encodings
  // (decodeAdd) then equals the sum of the values read in place, but for NaN payloads, and
  // encoding that sum gives the same bytes. The simulator's all-reduce reads its ranks'
  // inputs in place instead of encoding them. false (the default): no such promise.
  virtual bool encodesFp32Bits() const { return false; }
};

}  // namespace aps::precision
