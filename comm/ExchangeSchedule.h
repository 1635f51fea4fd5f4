#pragma once

#include "comm/InputFacts.h"
#include "comm/ScratchArena.h"
#include "comm/Transport.h"
#include "precision/Codec.h"

#include <cstdint>
#include <span>
#include <vector>

namespace aps::comm {

// Sees the encodes an all-reduce makes, for the fidelity probe (docs/ALGORITHMS.md, Fidelity
// probe) and the statistics of re-encoded sums: the fp32 values about to be encoded and what
// the wire bytes decode to. `begin` is the position of values[0] in the all-reduced buffer.
// Called on the thread that runs the all-reduce, for the encodes of this process's ranks;
// schedules report only the sites an observer wants (no decode otherwise).
class EncodeObserver {
 public:
  enum class Site {
    Input,  // a rank's own contribution, encoded for sending
    Sum,    // a (partial) sum re-encoded: two_shot's owner, each ring hop
  };
  virtual ~EncodeObserver() = default;
  // Whether encodes at `site` are wanted (others are not decoded or reported).
  virtual bool observes(Site /*site*/) const { return true; }
  // Of an all-reduce over a GPU's buffers: whether encoded() takes the values where they lie
  // (device pointers, read by work it queues on the calling thread's current stream before it
  // returns); if not, it is handed host copies (a wait each).
  virtual bool readsDeviceMemory() const { return false; }
  virtual void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) = 0;
};

// The bookkeeping every all-reduce schedule shares: it collects the messages of one round,
// hands them to the transport, counts the bytes each local rank puts on the wire, splits a
// buffer into per-rank chunks and derives the stochastic-rounding context of each encode.
// An algorithm drives it the same way on every process; only the transport differs.
class ExchangeSchedule {
 public:
  static constexpr int kObserverScratch = 16;

  ExchangeSchedule(Transport& transport, const precision::EncodeContext& base, ScratchArena& scratch);

  int worldSize() const { return world_; }
  const precision::EncodeContext& baseContext() const { return base_; }
  int firstLocalRank() const { return first_; }
  int localRankCount() const { return local_; }
  bool isLocal(int rank) const { return rank >= first_ && rank < first_ + local_; }
  // Whether the buffers and scratch are device memory (AllReduceOptions::device).
  bool onDevice() const { return scratch_.device().isCuda(); }
  Device device() const { return scratch_.device(); }
  // Transport::sharesMemory: local ranks may read each other's bytes in place.
  bool sharesMemory() const { return transport_.sharesMemory(); }

  // Queues src -> dst for the current round. Pointers are only read on the local side;
  // messages with neither side local and empty messages are dropped. Bytes are counted for
  // a local sender when src != dst.
  void add(int src, int dst, const void* sendData, void* recvData, size_t bytes);
  // Counts bytes that a local rank sends without queueing a copy (used when simulated
  // receivers share one buffer that already holds the data).
  void countSent(int src, size_t bytes);
  // Delivers the queued round.
  void flush();
  // Hands the queued round to the transport without waiting (Transport::startExchange): the
  // pipelined schedule computes on other segments while it moves. An empty round starts
  // nothing.
  ExchangeTicket start();
  // Waits for a started round.
  void wait(ExchangeTicket ticket);
  // Lets the rounds in flight move (Transport::testExchange on those not yet complete): call
  // it between slices of computation while rounds are in flight.
  void progress();

  // One all-gather round into a buffer that all local ranks share (they would receive the
  // same bytes): local rank i sends sendData[i] (counts[rank] bytes) to every rank, and the
  // block of rank r lands at recv + offsets[r]. The copies between simulated ranks collapse
  // into one per sender, but bytes are counted as the real all-gather sends them.
  void allGatherShared(std::span<const void* const> sendData, std::span<const size_t> counts,
                       std::span<const size_t> offsets, void* recv);
  // The same round, started (see start()).
  ExchangeTicket startAllGatherShared(std::span<const void* const> sendData, std::span<const size_t> counts,
                                      std::span<const size_t> offsets, void* recv);

  // The observer of this all-reduce's encodes (null: none, the default).
  void setObserver(EncodeObserver* observer) { observer_ = observer; }
  // Whether every local rank's buffer must hold the result, or local rank 0's alone (the
  // caller reads no other: simulated ranks then skip copying the sum into each of theirs).
  void setResultInFirstOnly(bool firstOnly) { resultInFirstOnly_ = firstOnly; }
  bool resultInFirstOnly() const { return resultInFirstOnly_; }
  // AllReduceAlgorithm::run's inputsSummedInFirst.
  void setInputsSummedInFirst(bool summed) { inputsSummedInFirst_ = summed; }
  bool inputsSummedInFirst() const { return inputsSummedInFirst_; }
  // The scalings the algorithm applies to every input as it reads it (InputFacts::shifts;
  // only where AllReduceAlgorithm::appliesInputShifts said it would). Not owned.
  void setInputShifts(std::span<const InputShift> shifts) { inputShifts_ = shifts; }
  std::span<const InputShift> inputShifts() const { return inputShifts_; }
  // Inputs kept as sticky 16-bit keys (InputFacts::sticky16; null: data[i] holds them). Not owned.
  void setSticky16Inputs(const Sticky16Inputs* inputs) { sticky16_ = inputs; }
  const Sticky16Inputs* sticky16Inputs() const { return sticky16_; }
  bool observing(EncodeObserver::Site site) const { return observer_ != nullptr && observer_->observes(site); }
  // Reports an encode of values[0, n) (buffer position `begin`) into `encoded` to the
  // observer, decoding the bytes first; nothing without an observer. Over device buffers the
  // observer is given host copies of both.
  void observeEncode(const precision::Codec& codec, EncodeObserver::Site site, int64_t begin, int64_t n,
                     const float* values, const uint8_t* encoded);

  // data[i] <- data[0] (n floats) for every local rank but the first, unless only the first
  // need hold the result (setResultInFirstOnly); device copies over device buffers.
  void copyResultToLocalRanks(std::span<float* const> data, int64_t n) const;

  // Bytes each local rank sent so far (index = rank - firstLocalRank()).
  const std::vector<uint64_t>& bytesSent() const { return bytesSent_; }

  // Reusable scratch for buffers that live for one all-reduce: slot `kind` of local rank i.
  // Kinds from kObserverScratch on are observeEncode's; schedules use smaller ones.
  uint8_t* scratch(int kind, size_t localIndex, size_t bytes) {
    return scratch_.bytes(static_cast<size_t>(kind) * static_cast<size_t>(local_) + localIndex, bytes);
  }
  float* scratchFloats(int kind, size_t localIndex, size_t count) {
    return reinterpret_cast<float*>(scratch(kind, localIndex, count * sizeof(float)));
  }

  // Chunk c of n values split over the world: [chunkBegin(n, c), chunkBegin(n, c + 1)).
  int64_t chunkBegin(int64_t n, int c) const { return n * c / world_; }
  int64_t chunkSize(int64_t n, int c) const { return chunkBegin(n, c + 1) - chunkBegin(n, c); }

  // Where the encoded chunks of an n-value buffer lie: chunk c takes counts[c] bytes at
  // offsets[c]; offsets[worldSize()] is the whole encoded size, maxCount the largest chunk.
  struct EncodedLayout {
    std::vector<size_t> counts, offsets;
    size_t maxCount = 0;
  };
  EncodedLayout encodedLayout(const precision::Codec& codec, int64_t n) const;

  // The context of an encode made by `rank` (-1: a computation every rank repeats) in
  // schedule phase `phase`, of values starting at element `offset` of the buffer.
  precision::EncodeContext encodeContext(int rank, int phase, int64_t offset) const;

 private:
  Transport& transport_;
  ScratchArena& scratch_;
  precision::EncodeContext base_;
  int world_;
  int first_;
  int local_;
  std::vector<Message> round_;
  std::vector<ExchangeTicket> inFlight_;  // started, not yet known to be complete
  std::vector<uint64_t> bytesSent_;
  EncodeObserver* observer_ = nullptr;
  bool resultInFirstOnly_ = false;
  bool inputsSummedInFirst_ = false;
  std::span<const InputShift> inputShifts_;
  const Sticky16Inputs* sticky16_ = nullptr;
  std::vector<float> observedValues_, observedDecoded_;  // observeEncode's host copies (device buffers)
};

// The encode context of schedule phase `phase` run by `rank` (-1: a computation every rank
// repeats) for values starting at element `offset`: distinct random streams per encode site,
// derived from the all-reduce's base context only.
precision::EncodeContext scheduleEncodeContext(const precision::EncodeContext& base, int rank, int phase,
                                               int64_t offset);

// Encoded size of n values, 0 for an empty chunk (no codec call, no message).
inline size_t encodedSize(const precision::Codec& codec, int64_t n) { return n > 0 ? codec.encodedBytes(n) : 0; }

}  // namespace aps::comm
