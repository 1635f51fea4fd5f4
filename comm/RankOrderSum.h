#pragma once

#include "precision/Codec.h"

#include <cstdint>
#include <vector>

namespace aps::comm {

// The sum of encoded contributions taken one at a time in rank order, as every
// receiving rank of two_shot and allgather computes it: in fp32, or rounded to the wire
// format after every add (the APS artifact), optionally Kahan-compensated. One class so the
// two schedules share the arithmetic and cannot drift apart.
class RankOrderSum {
 public:
  enum class Mode { Fp32, RoundEveryAdd, Kahan };

  // `base` is the all-reduce's encode context; rounding steps draw their random bits from
  // phases after `firstPhase` with rank -1 (the same bits on every rank).
  RankOrderSum(const precision::Codec& codec, Mode mode, const precision::EncodeContext& base, int firstPhase);

  // Starts a sum of n values.
  void reset(int64_t n);
  // Fp32 mode: starts a sum of n values kept in the caller's acc[0, n) (two_shot sums a
  // chunk segment by segment into one buffer; allgather sums into its result).
  void resetInto(int64_t n, float* acc);
  // RoundEveryAdd mode: starts a sum whose running encoding is kept in the caller's
  // acc[0, encodedBytes(n)) (device memory, where the codec's buffers are).
  void resetEncodedInto(int64_t n, uint8_t* acc);
  // Adds the next rank's encoded contribution (encodedBytes(n) bytes). RoundEveryAdd reads the
  // first rank's where it lies: it must stay until the second is added.
  void add(const uint8_t* encoded);
  // The Fp32 mode's step, for a sum kept outside a RankOrderSum (the simulator folding ranks
  // as they arrive, AllReduceAlgorithm::foldInput): sum (n) <- the first rank's contribution
  // decoded, or sum + the next one's decoded.
  static void addFp32(const precision::Codec& codec, const uint8_t* encoded, int64_t n, float* sum, bool first);
  // The sum: fp32 (Fp32), decoded from the format (RoundEveryAdd), or the compensated sum.
  // `out` may be the buffer given to resetInto.
  void result(float* out) const;
  // Fp32 mode: the running sum itself.
  const float* fp32Sum() const { return sum_; }
  int added() const { return added_; }

 private:
  void restart(int64_t n);  // a sum of n values, nothing added yet
  void roundToFormat(std::vector<float>& v);

  const precision::Codec& codec_;
  Mode mode_;
  precision::EncodeContext base_;
  int firstPhase_;
  int64_t n_ = 0;
  int added_ = 0;
  int step_ = 0;
  std::vector<float> acc_, comp_, x_, y_, t_;  // fp32 sum; Kahan state
  float* sum_ = nullptr;                       // Fp32: acc_ or the caller's buffer
  std::vector<uint8_t> accEncoded_, scratch_;
  uint8_t* encodedSum_ = nullptr;          // RoundEveryAdd: accEncoded_ or the caller's buffer
  const uint8_t* firstEncoded_ = nullptr;  // RoundEveryAdd: the first contribution, as it lies
};

}  // namespace aps::comm
