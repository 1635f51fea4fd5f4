#pragma once

#include "framework/tensor/Device.h"
#include "precision/Codec.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace aps::comm {

// A power-of-two scaling a hook left for the reduction to apply as it reads its inputs: every
// local rank's values [begin, begin + length) times 2^shift, rounded as
// precision::scaleByPowerOfTwo rounds them (so the same bits as scaling the buffers in place).
struct InputShift {
  int64_t begin = 0;
  int64_t length = 0;
  int shift = 0;
};

// Simulated ranks' inputs kept as sticky 16-bit keys (precision::copyMaxAbsBitsSticky16) by
// GradientReducer where the wire codec rounds them exactly (Codec::roundsSticky16Exactly):
// half the bytes of fp32 copies. Layers of a rank that held fp32 subnormals are kept whole
// too (`exact`), since a large enough shift would lift them into the format's range.
struct Sticky16Inputs {
  struct Exact {
    int64_t begin = 0;  // in the bucket's buffer
    int64_t length = 0;
    const float* values = nullptr;
  };
  std::vector<const uint16_t*> keys;      // [local rank]: its buffer's keys; null where data[i] holds its values
  std::vector<std::vector<Exact>> exact;  // [local rank]: ranges kept whole, ascending, not overlapping
};

// Values [begin, begin + n) of local rank i's input (keys[i] not null) as floats, into out.
void readSticky16(const Sticky16Inputs& inputs, size_t i, int64_t begin, int64_t n, float* out);

// What the hooks before a reduction tell it about its inputs (BucketContext::inputs).
struct InputFacts {
  // Whether any rank's buffer holds a NaN or an infinity, found out by a hook that read every
  // local rank's whole buffer and agreed on it with every rank (comm::smallAllReduce): the
  // reduction then skips its own pass over the inputs for the same answer. A hook that changes
  // the values afterwards must leave the answer true of what it leaves (APS's power-of-two
  // scaling keeps finite values finite).
  std::optional<bool> nonFinite;
  // Scalings not yet applied to the buffers, in increasing `begin`, not overlapping (APS's
  // per-layer shifts: ApsHook leaves them here rather than scaling every rank's buffer in place,
  // a read and a write of each). AllReduceAlgorithm::run applies them: as it reads the inputs
  // where its path can (the simulator's two_shot encodes each sender's values in the cache),
  // else in place first. A hook that reads the values before the reduction sees them applied
  // (BucketScaling applies them before such a hook, BucketHook::readsValues).
  std::vector<InputShift> shifts;
  // Where set (by the reducer, not a hook), local ranks' inputs to read instead of their
  // buffers (which are then null): only an algorithm that reads its inputs where they lie
  // and applies the shifts itself takes them (AllReduceAlgorithm::readsSticky16Inputs).
  const Sticky16Inputs* sticky16 = nullptr;
};

// data[i][begin, begin + length) *= 2^shift for every shift and every buffer, on all threads
// (buffers on a GPU: as kernels queued on the calling thread's current stream, with the same
// rounding).
void applyInputShifts(std::span<float* const> data, std::span<const InputShift> shifts, Device device = Device::cpu());

// The values [begin, begin + n) of a buffer (`in`) as the reduction reads them: `in` itself
// where no shift covers any of them, else `out` (n floats) holding them with the shifts applied.
const float* shiftedInputs(std::span<const InputShift> shifts, int64_t begin, int64_t n, const float* in, float* out);
// The one shift the values [begin, begin + n) take from `shifts` (0 where none covers them);
// aps::Error where they take different ones (APS leaves one per layer).
int uniformShift(std::span<const InputShift> shifts, int64_t begin, int64_t n);

// codec.roundTripInto of local rank i's values [begin, begin + n) as the reduction reads them
// (readSticky16, then shiftedInputs), range by range between the whole copies' and the shifts'
// boundaries: the keys widened, scaled and rounded in registers where the codec can
// (Codec::roundTripKeysInto), the rest through `widened` and `scaled` (n floats each; `scaled`
// may be null without shifts). Only for a codec that rounds alike at any cut
// (Codec::roundTripsAlikeAtAnyCut); ctx is the encode context of value `begin`.
void roundTripSticky16Into(const precision::Codec& codec, const Sticky16Inputs& inputs, size_t i,
                           std::span<const InputShift> shifts, int64_t begin, int64_t n, float* acc, bool add,
                           float* widened, float* scaled, uint8_t* bytes, const precision::EncodeContext& ctx);

}  // namespace aps::comm
