#pragma once

#include "comm/AllReduceAlgorithm.h"

#include <memory>

namespace aps::comm {

// The classic ring (Patarasuk and Yuan, 2009; NCCL): N-1 reduce-scatter hops in which each
// rank decodes the partial sum it receives, adds its own encoded chunk and re-encodes
// (Codec::decodeAddEncode), then N-1 all-gather hops forwarding the encoded sums. The sum
// is rounded to the wire format at every hop, so the error grows with the rank count
// (docs/ALGORITHMS.md, All-reduce algorithms; this is what NCCL's fp8 reductions do).
class RingAllReduce final : public AllReduceAlgorithm {
 public:
  explicit RingAllReduce(std::shared_ptr<const precision::Codec> codec);
  std::string name() const override;

 protected:
  void reduce(ExchangeSchedule& schedule, std::span<float* const> data, int64_t n) const override;

 private:
  std::shared_ptr<const precision::Codec> codec_;
};

}  // namespace aps::comm
