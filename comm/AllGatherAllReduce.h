#pragma once

#include "comm/AllReduceAlgorithm.h"
#include "comm/RankOrderSum.h"

#include <memory>

namespace aps::comm {

// The APS artifact's reduction (Han, Demmel, You, ISC 2021): every rank all-gathers every
// rank's encoded gradient and sums them itself in rank order. With roundEveryAdd the
// running sum is rounded to the wire format after every add (optionally Kahan-compensated),
// emulating a sum computed in the low-precision format; otherwise the sum is fp32. Sends
// (N-1) times the encoded buffer per rank, so it is a semantics reference, not a fast path.
class AllGatherAllReduce final : public AllReduceAlgorithm {
 public:
  AllGatherAllReduce(std::shared_ptr<const precision::Codec> codec, bool roundEveryAdd, bool kahan);
  std::string name() const override;

  // Encode-context phases of the schedule.
  static constexpr int kEncodeInputPhase = 0;
  static constexpr int kSumPhase = 1;
  static RankOrderSum::Mode sumMode(bool roundEveryAdd, bool kahan);

 protected:
  void reduce(ExchangeSchedule& schedule, std::span<float* const> data, int64_t n) const override;

 private:
  std::shared_ptr<const precision::Codec> codec_;
  bool roundEveryAdd_;
  bool kahan_;
};

}  // namespace aps::comm
