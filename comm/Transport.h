#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace aps::comm {

// One point-to-point transfer inside an exchange round. Only the local side of a message
// needs a pointer: sendData when src lives in this process, recvData when dst does.
struct Message {
  int src = 0;
  int dst = 0;
  const void* sendData = nullptr;
  void* recvData = nullptr;
  size_t bytes = 0;
};

// A round started by Transport::startExchange and not yet waited for; kExchangeDone (0)
// names a round that completed inside startExchange.
using ExchangeTicket = uint64_t;
inline constexpr ExchangeTicket kExchangeDone = 0;

// What an all-reduce schedule runs on: a world of ranks, some of which (a contiguous
// range) live in this process, and a way to move the bytes of one round of messages.
// Real ranks (MPI) host one rank each; the simulator hosts all of them. Because every
// algorithm is written once against this interface and each rank's arithmetic depends
// only on its own buffers and the bytes it receives, a simulated world produces the same
// bits as a real one by construction (docs/ARCHITECTURE.md, "Simulated ranks that match real ones").
class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string transportName() const = 0;
  virtual int worldSize() const = 0;
  virtual int firstLocalRank() const = 0;
  virtual int localRankCount() const = 0;

  bool isLocal(int rank) const { return rank >= firstLocalRank() && rank < firstLocalRank() + localRankCount(); }

  // Delivers one round: every message with a local sender is sent and every message with
  // a local receiver is received before this returns. Messages between the same pair are
  // matched in list order, so every process must list a round's messages in the same
  // relative order (schedules generate them from the same loop on every rank).
  // Messages in which neither side is local are ignored.
  // A transport of device memory (NCCL, a SimTransport on a GPU) delivers in stream order:
  // "before this returns" is before any work the calling thread queues next on its current
  // stream (cuda::currentStream()); the host reads the bytes after a wait for that stream
  // (cuda::copySync).
  virtual void exchange(std::span<const Message> round) = 0;

  // The same delivery without waiting for it, so that a schedule can compute while bytes
  // move (two_shot's pipeline, docs/ALGORITHMS.md). Until waitExchange(ticket) returns, no
  // send buffer of the round may change and no receive buffer may be touched; the list
  // itself may go once this returns. Rounds in flight together match their messages in the
  // order they were started, so every process starts a schedule's rounds in the same order.
  // Every ticket is waited for exactly once. The default, for transports that deliver
  // synchronously (the simulator, Python's, NCCL's today), delivers the round here.
  virtual ExchangeTicket startExchange(std::span<const Message> round) {
    exchange(round);
    return kExchangeDone;
  }
  // Lets the transport move the bytes of rounds in flight (OpenMPI's TCP transport moves
  // them only inside MPI calls) and says whether `ticket` has completed. Cheap; schedules
  // call it between slices of computation.
  virtual bool testExchange(ExchangeTicket /*ticket*/) { return true; }
  // Returns once the round of `ticket` is delivered; releases the ticket.
  virtual void waitExchange(ExchangeTicket /*ticket*/) {}
  // Whether local ranks share one address space and a round between them would be plain
  // copies (the simulator): a schedule may then leave such messages out, count their bytes
  // (ExchangeSchedule::countSent) and read the sender's bytes where they lie.
  virtual bool sharesMemory() const { return false; }
};

}  // namespace aps::comm
