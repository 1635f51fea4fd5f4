#pragma once

#include "comm/AllReduceAlgorithm.h"

#include <memory>

namespace aps::comm {

// Reduce-scatter by all-to-all, then all-gather: rank c receives every rank's encoded chunk
// c, decodes and sums them in fp32 in rank order, encodes the sum once and all-gathers it.
// Each value is quantised once at the input and once at the output, so the error does not
// grow with the rank count (the "all-to-all + fp32 local sum" design that replaces ring
// all-reduces in the wire format; docs/ALGORITHMS.md, All-reduce algorithms). This is the default algorithm.
class TwoShotAllReduce final : public AllReduceAlgorithm {
 public:
  TwoShotAllReduce(std::shared_ptr<const precision::Codec> codec, std::string name = "two_shot");
  std::string name() const override;

  // Encode-context phases of the schedule.
  static constexpr int kEncodeInputPhase = 0;
  static constexpr int kEncodeSumPhase = 1;

 protected:
  void reduce(ExchangeSchedule& schedule, std::span<float* const> data, int64_t n) const override;

 private:
  std::shared_ptr<const precision::Codec> codec_;
  std::string name_;
};

}  // namespace aps::comm
