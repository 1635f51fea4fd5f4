#pragma once

#include "comm/ReduceOp.h"
#include "comm/Transport.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace aps::comm {

// A backend-specific stream (e.g. a cudaStream_t for a future NCCL backend) on which a
// communicator enqueues its work. CPU backends run synchronously and accept only null.
struct StreamHandle {
  void* native = nullptr;
};

// The per-process view of a group of ranks: the collectives a training loop needs.
// A communicator is also the Transport its process's rank runs all-reduce schedules on
// (comm/AllReduceAlgorithm.h), with one local rank: itself.
// Calls are blocking and collective calls must be made in the same order on every rank.
// Only one thread may call into a communicator at a time (GradientReducer's communication
// thread owns it while a step is in flight).
class Communicator : public Transport {
 public:
  virtual std::string backend() const = 0;  // "mpi", ...
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks that share this rank's node (its memory): the default thread count divides the
  // node's cores among them.
  virtual int ranksOnNode() const = 0;

  virtual void barrier() = 0;
  // data[0, bytes) of root is copied to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // In place, element-wise over ranks. The order of a Sum is the backend's (for MPI,
  // implementation-defined); use an AllReduceAlgorithm where bits must be reproducible.
  virtual void allReduce(float* data, int64_t n, ReduceOp op) = 0;
  // out[r * bytes, (r + 1) * bytes) <- in of rank r.
  virtual void allGather(const void* in, size_t bytes, void* out) = 0;
  // Rank r sends send[sendOffsets[d], +sendCounts[d]) to rank d, which receives it at
  // recv[recvOffsets[r], +recvCounts[r]). Counts and offsets are in bytes, size() each.
  virtual void allToAllV(const void* send, std::span<const size_t> sendCounts, std::span<const size_t> sendOffsets,
                         void* recv, std::span<const size_t> recvCounts, std::span<const size_t> recvOffsets) = 0;
  virtual void send(const void* data, size_t bytes, int dst, int tag = 0) = 0;
  virtual void recv(void* data, size_t bytes, int src, int tag = 0) = 0;

  // Where a device backend would enqueue its work; see StreamHandle.
  virtual void setStream(StreamHandle stream) = 0;

  // Ends the whole job (every rank) with a message naming this rank; a failing rank must
  // not leave the others waiting in a collective (docs/ARCHITECTURE.md, "Errors and crash safety").
  [[noreturn]] virtual void abort(const std::string& why) = 0;

  // Transport: this process hosts exactly one rank.
  int worldSize() const override { return size(); }
  int firstLocalRank() const override { return rank(); }
  int localRankCount() const override { return 1; }
};

}  // namespace aps::comm
