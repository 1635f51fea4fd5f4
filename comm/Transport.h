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
  virtual void exchange(std::span<const Message> round) = 0;
};

}  // namespace aps::comm
