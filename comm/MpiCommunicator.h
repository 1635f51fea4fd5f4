#pragma once

#include "comm/Communicator.h"

#include <mpi.h>

#include <functional>
#include <utility>
#include <vector>

namespace aps::comm {

// The Communicator of one real rank on MPI (OpenMPI). The first communicator initialises
// MPI with MPI_Init_thread (requesting MPI_THREAD_MULTIPLE, requiring at least
// MPI_THREAD_SERIALIZED so that a communication thread may own the calls) and MPI is
// finalised at process exit. A program started without mpirun is a world of one.
// Each communicator works on its own duplicate of MPI_COMM_WORLD, so communicators must
// be created (and destroyed) in the same order on every rank.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string backend() const override { return "mpi"; }
  std::string transportName() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranksOnNode() const override { return ranksOnNode_; }
  // This rank's index among the ranks on its node (0 .. ranksOnNode() - 1): picks its GPU.
  int localRank() const { return localRank_; }

  void barrier() override;
  void broadcast(void* data, size_t bytes, int root) override;
  void allReduce(float* data, int64_t n, ReduceOp op) override;
  void allGather(const void* in, size_t bytes, void* out) override;
  void allToAllV(const void* send, std::span<const size_t> sendCounts, std::span<const size_t> sendOffsets, void* recv,
                 std::span<const size_t> recvCounts, std::span<const size_t> recvOffsets) override;
  void send(const void* data, size_t bytes, int dst, int tag = 0) override;
  void recv(void* data, size_t bytes, int src, int tag = 0) override;
  void setStream(StreamHandle stream) override;
  [[noreturn]] void abort(const std::string& why) override;

  void exchange(std::span<const Message> round) override;
  // Non-blocking rounds: startExchange posts the round's receives and sends (MPI_Irecv,
  // MPI_Isend) and keeps the requests under a ticket; testExchange is an MPI_Testall on them
  // (which also drives OpenMPI's progress engine for every request in flight).
  ExchangeTicket startExchange(std::span<const Message> round) override;
  bool testExchange(ExchangeTicket ticket) override;
  void waitExchange(ExchangeTicket ticket) override;

  // The thread level MPI granted (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  static int threadLevel();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int ranksOnNode_ = 1;
  int localRank_ = 0;
  // Requests of the rounds in flight, by ticket (few at a time: a pipeline keeps two or three).
  std::vector<std::pair<ExchangeTicket, std::vector<MPI_Request>>> inFlight_;
  ExchangeTicket nextTicket_ = 1;
  std::vector<MPI_Request>& requestsOf(ExchangeTicket ticket);
};

// Runs body; if it throws while more than one rank is running, aborts the whole job with
// MPI_Abort and a message naming the rank instead of letting the others hang. With a
// world of one the exception propagates as usual.
void abortJobOnError(MpiCommunicator& comm, const std::function<void()>& body);

}  // namespace aps::comm
