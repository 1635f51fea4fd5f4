#include "comm/MpiCommunicator.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

namespace aps::comm {

namespace {

int gThreadLevel = -1;

void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void checkMpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  APS_FAIL("{} failed: {}", call, std::string(text, static_cast<size_t>(length)));
}

// Initialises MPI once per process; later communicators reuse it.
void ensureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    if (gThreadLevel < 0) MPI_Query_thread(&gThreadLevel);
  } else {
    checkMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &gThreadLevel), "MPI_Init_thread");
    std::atexit(finalizeMpi);
  }
  APS_CHECK(gThreadLevel >= MPI_THREAD_SERIALIZED,
            "MPI provides thread level {}, but the gradient reducer needs at least MPI_THREAD_SERIALIZED",
            gThreadLevel);
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

// MPI counts are int; larger transfers are split into pieces of this many bytes.
constexpr size_t kMaxPieceBytes = size_t{1} << 30;

int intCount(size_t n, const char* what) {
  APS_CHECK(n <= static_cast<size_t>(INT_MAX), "comm: {} of {} bytes exceeds MPI's int count", what, n);
  return static_cast<int>(n);
}

}  // namespace

MpiCommunicator::MpiCommunicator() {
  ensureMpi();
  checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm node = MPI_COMM_NULL;
  checkMpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &ranksOnNode_);
  MPI_Comm_rank(node, &localRank_);
  MPI_Comm_free(&node);
}

MpiCommunicator::~MpiCommunicator() {
  // Destroyed by an exception on its way out: the other ranks may already wait in a
  // collective this rank will never join, so end the job rather than hang it.
  if (std::uncaught_exceptions() > 0 && size_ > 1) {
    abort("an exception is propagating out of the scope that owns the communicator");
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int MpiCommunicator::threadLevel() { return gThreadLevel; }

void MpiCommunicator::barrier() { checkMpi(MPI_Barrier(comm_), "MPI_Barrier"); }

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  APS_CHECK(root >= 0 && root < size_, "comm broadcast: root {} is not a rank of a world of {}", root, size_);
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMaxPieceBytes) {
    const size_t piece = std::min(kMaxPieceBytes, bytes - done);
    checkMpi(MPI_Bcast(p + done, static_cast<int>(piece), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
}

void MpiCommunicator::allReduce(float* data, int64_t n, ReduceOp op) {
  APS_CHECK(n >= 0, "comm allReduce: negative count {}", n);
  constexpr int64_t kPiece = int64_t{1} << 28;
  for (int64_t done = 0; done < n; done += kPiece) {
    const int64_t piece = std::min(kPiece, n - done);
    checkMpi(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(piece), MPI_FLOAT, mpiOp(op), comm_),
             "MPI_Allreduce");
  }
}

void MpiCommunicator::allGather(const void* in, size_t bytes, void* out) {
  const int count = intCount(bytes, "allGather block");
  checkMpi(MPI_Allgather(in, count, MPI_BYTE, out, count, MPI_BYTE, comm_), "MPI_Allgather");
}

void MpiCommunicator::allToAllV(const void* send, std::span<const size_t> sendCounts,
                                std::span<const size_t> sendOffsets, void* recv, std::span<const size_t> recvCounts,
                                std::span<const size_t> recvOffsets) {
  const auto n = static_cast<size_t>(size_);
  APS_CHECK(sendCounts.size() == n && sendOffsets.size() == n && recvCounts.size() == n && recvOffsets.size() == n,
            "comm allToAllV: counts and offsets need one entry per rank ({})", n);
  std::vector<int> sc(n), so(n), rc(n), ro(n);
  for (size_t i = 0; i < n; ++i) {
    sc[i] = intCount(sendCounts[i], "allToAllV send count");
    so[i] = intCount(sendOffsets[i], "allToAllV send offset");
    rc[i] = intCount(recvCounts[i], "allToAllV recv count");
    ro[i] = intCount(recvOffsets[i], "allToAllV recv offset");
  }
  checkMpi(MPI_Alltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE, comm_),
           "MPI_Alltoallv");
}

void MpiCommunicator::send(const void* data, size_t bytes, int dst, int tag) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes || done == 0; done += kMaxPieceBytes) {
    const size_t piece = std::min(kMaxPieceBytes, bytes - done);
    checkMpi(MPI_Send(p + done, static_cast<int>(piece), MPI_BYTE, dst, tag, comm_), "MPI_Send");
    if (bytes == 0) break;
  }
}

void MpiCommunicator::recv(void* data, size_t bytes, int src, int tag) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes || done == 0; done += kMaxPieceBytes) {
    const size_t piece = std::min(kMaxPieceBytes, bytes - done);
    checkMpi(MPI_Recv(p + done, static_cast<int>(piece), MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    if (bytes == 0) break;
  }
}

void MpiCommunicator::setStream(StreamHandle stream) {
  APS_CHECK(stream.native == nullptr, "comm: the mpi backend runs on the CPU and takes no device stream");
}

void MpiCommunicator::abort(const std::string& why) {
  std::fprintf(stderr, "aps: rank %d of %d failed: %s; aborting the job\n", rank_, size_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void MpiCommunicator::exchange(std::span<const Message> round) { waitExchange(startExchange(round)); }

ExchangeTicket MpiCommunicator::startExchange(std::span<const Message> round) {
  // Zero-byte messages are skipped on both sides (both know the size). Schedules use tag 0:
  // the order of a round's list, and of the rounds in flight, fixes which receive matches
  // which send (MPI's non-overtaking rule for one source, tag and communicator).
  std::vector<MPI_Request> requests;
  requests.reserve(round.size() * 2);
  for (const Message& m : round) {
    if (m.src == rank_ && m.dst == rank_) {
      if (m.bytes > 0 && m.recvData != m.sendData) std::memmove(m.recvData, m.sendData, m.bytes);
      continue;
    }
    if (m.dst == rank_) {
      auto* p = static_cast<char*>(m.recvData);
      for (size_t done = 0; done < m.bytes; done += kMaxPieceBytes) {
        const size_t piece = std::min(kMaxPieceBytes, m.bytes - done);
        requests.emplace_back();
        checkMpi(MPI_Irecv(p + done, static_cast<int>(piece), MPI_BYTE, m.src, 0, comm_, &requests.back()),
                 "MPI_Irecv");
      }
    }
  }
  for (const Message& m : round) {
    if (m.src != rank_ || m.dst == rank_) continue;
    const auto* p = static_cast<const char*>(m.sendData);
    for (size_t done = 0; done < m.bytes; done += kMaxPieceBytes) {
      const size_t piece = std::min(kMaxPieceBytes, m.bytes - done);
      requests.emplace_back();
      checkMpi(MPI_Isend(p + done, static_cast<int>(piece), MPI_BYTE, m.dst, 0, comm_, &requests.back()), "MPI_Isend");
    }
  }
  if (requests.empty()) return kExchangeDone;
  const ExchangeTicket ticket = nextTicket_++;
  inFlight_.emplace_back(ticket, std::move(requests));
  return ticket;
}

std::vector<MPI_Request>& MpiCommunicator::requestsOf(ExchangeTicket ticket) {
  for (auto& [t, requests] : inFlight_) {
    if (t == ticket) return requests;
  }
  APS_FAIL("comm mpi: exchange ticket {} is not in flight", ticket);
}

bool MpiCommunicator::testExchange(ExchangeTicket ticket) {
  if (ticket == kExchangeDone) return true;
  std::vector<MPI_Request>& requests = requestsOf(ticket);
  // Completed requests become MPI_REQUEST_NULL, so a later test or wait skips them.
  int done = 0;
  checkMpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  return done != 0;
}

void MpiCommunicator::waitExchange(ExchangeTicket ticket) {
  if (ticket == kExchangeDone) return;
  std::vector<MPI_Request>& requests = requestsOf(ticket);
  checkMpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  std::erase_if(inFlight_, [ticket](const auto& entry) { return entry.first == ticket; });
}

void abortJobOnError(MpiCommunicator& comm, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    if (comm.size() > 1) comm.abort(e.what());
    throw;
  }
}

}  // namespace aps::comm
