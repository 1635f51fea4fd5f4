#pragma once

#include "comm/AllReduceAlgorithm.h"

#include <memory>

namespace aps::comm {

// Reduce-scatter by all-to-all, then all-gather: rank c receives every rank's encoded chunk
// c, decodes and sums them in fp32 in rank order, encodes the sum once and all-gathers it.
// Each value is quantised once at the input and once at the output, so the error does not
// grow with the rank count (the "all-to-all + fp32 local sum" design that replaces ring
// all-reduces in the wire format; docs/ALGORITHMS.md, All-reduce algorithms). This is the default algorithm.
//
// Pipelined: every chunk is cut into segments of about segmentBytes() wire bytes (a multiple
// of the codec's splitGranule() values), and while segment k's bytes are on the wire, segment k + 1 is
// encoded and segment k - 1 summed or decoded (docs/ALGORITHMS.md, Pipelined two_shot). The
// cuts are where the codec promises that the pieces carry exactly what the whole chunk's
// encoding carries, so the result, the bytes sent and what observers see do not depend on
// the segment length; a codec that cannot be cut runs as one segment per chunk.
class TwoShotAllReduce final : public AllReduceAlgorithm {
 public:
  TwoShotAllReduce(std::shared_ptr<const precision::Codec> codec, std::string name = "two_shot",
                   int64_t segmentBytes = kDefaultSegmentBytes);
  std::string name() const override;

  // Encode-context phases of the schedule.
  static constexpr int kEncodeInputPhase = 0;
  static constexpr int kEncodeSumPhase = 1;

  // How the chunks of n values split over `world` ranks are cut: segments of `length`
  // values from each chunk's start (the last one shorter), `count` of them in the longest
  // chunk (0 for n = 0). One segment per chunk when the codec cannot be cut, pipelining is
  // off (segmentBytes 0) or the chunks are no longer than a segment.
  struct Segments {
    int64_t length = 0;
    int64_t count = 0;
  };
  Segments segments(int64_t n, int world) const;
  int64_t segmentBytes() const { return segmentBytes_; }

  // fp32 on the wire (Codec::encodesFp32Bits): the owners' sums are fp32 sums of the inputs
  // in rank order, so they can be taken ahead (AllReduceAlgorithm::sumsInputsAhead).
  bool sumsInputsAhead() const override { return codec_->encodesFp32Bits(); }
  void foldInput(float* acc, const float* input, int64_t n, bool first) const override;
  // Every sender's values are encoded as they are read (encodesAtOwners; run() checks it).
  bool readsSticky16Inputs() const override { return codec_->roundsSticky16Exactly(); }

 protected:
  void reduce(ExchangeSchedule& schedule, std::span<float* const> data, int64_t n) const override;
  // fp32 on the wire: the owners' fp32 sums see every input value, and NaN and inf survive
  // the sum and its encoding.
  bool resultKeepsNonFinite() const override { return codec_->encodesFp32Bits(); }
  // In the simulator, where each sender's values are encoded by the thread that adds them.
  bool appliesInputShifts(const ExchangeSchedule& schedule) const override { return encodesAtOwners(schedule); }

 private:
  // Whether every rank of the world lives in this process (one address space), the inputs
  // are encoded (not fp32 read in place, not summed ahead) and no observer wants their
  // encodings: then the owner of chunk c encodes each sender's piece itself, in the cache,
  // just before adding it, instead of the sender writing bytes the owner reads back.
  bool encodesAtOwners(const ExchangeSchedule& schedule) const;

  std::shared_ptr<const precision::Codec> codec_;
  std::string name_;
  int64_t segmentBytes_;
};

}  // namespace aps::comm
