// NCCL's calls served by the host (comm/emu/nccl.h), for the emulated device's build. Each
// communicator is a duplicate of MPI_COMM_WORLD. A call checks its device buffers at once
// (emu::hostView: a host pointer where device memory belongs is an error, as on a GPU) and
// queues its transfer on its stream, where it runs after the work queued before it, over MPI
// on the buffers' host aliases. Sends and receives between two ranks match in the order they
// were posted (one MPI tag, MPI's non-overtaking order), as NCCL's do; a group's are posted
// together and waited for together. Reductions are MPI's (not in rank order: as NCCL's,
// their sums are not bitwise reproducible).
#include <nccl.h>

#include "framework/core/Error.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"

#include <mpi.h>

#include <climits>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace {

using aps::cuda::emu::enqueue;
using aps::cuda::emu::hostView;

constexpr int kTag = 0x6e63;  // "nc"

// One send or receive of a group.
struct PointToPoint {
  bool send = false;
  void* data = nullptr;  // device memory
  size_t bytes = 0;
  int peer = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

thread_local int groupDepth = 0;
thread_local std::vector<PointToPoint> grouped;

size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

// The MPI type of a reduction's elements; MPI_DATATYPE_NULL for the 16-bit floats, which MPI
// cannot add.
MPI_Datatype mpiType(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpiOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return MPI_SUM;
    case ncclProd:
      return MPI_PROD;
    case ncclMax:
      return MPI_MAX;
    case ncclMin:
      return MPI_MIN;
    case ncclAvg:
      break;
  }
  return MPI_OP_NULL;
}

void checkMpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  APS_FAIL("emulated NCCL: {} failed: {}", what, text);
}

bool usable(ncclComm_t comm) { return comm != nullptr && comm->mpi != MPI_COMM_NULL; }

// Bytes MPI can move in one call (its counts are int).
bool fits(size_t bytes) { return bytes <= static_cast<size_t>(INT_MAX); }

// Posts every send and receive of `ops` (one stream) on that stream and waits for them all.
void post(std::vector<PointToPoint> ops) {
  if (ops.empty()) return;
  for (const PointToPoint& op : ops) hostView(op.data, op.bytes);  // device memory, now
  const cudaStream_t stream = ops.front().stream;
  enqueue(stream, [ops = std::move(ops)] {
    std::vector<MPI_Request> requests(ops.size(), MPI_REQUEST_NULL);
    for (size_t i = 0; i < ops.size(); ++i) {
      const PointToPoint& op = ops[i];
      void* host = hostView(op.data, op.bytes);
      const int n = static_cast<int>(op.bytes);
      if (op.send) {
        checkMpi(MPI_Isend(host, n, MPI_BYTE, op.peer, kTag, op.comm->mpi, &requests[i]), "MPI_Isend");
      } else {
        checkMpi(MPI_Irecv(host, n, MPI_BYTE, op.peer, kTag, op.comm->mpi, &requests[i]), "MPI_Irecv");
      }
    }
    checkMpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  });
}

ncclResult_t pointToPoint(bool send, const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream) {
  const size_t bytes = count * typeSize(type);
  if (!usable(comm) || peer < 0 || peer >= comm->size || typeSize(type) == 0 || !fits(bytes)) {
    return ncclInvalidArgument;
  }
  if (bytes == 0) return ncclSuccess;
  PointToPoint op{send, const_cast<void*>(data), bytes, peer, comm, stream};
  if (groupDepth > 0) {
    if (!grouped.empty() && grouped.front().stream != stream) return ncclInvalidUsage;  // one stream a group
    grouped.push_back(op);
    return ncclSuccess;
  }
  post({op});
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = 0;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (emulated)";
    case ncclSystemError:
      return "unhandled system error (emulated NCCL over MPI)";
    case ncclInternalError:
      return "internal error (emulated NCCL)";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL: a bad communicator, peer, type or count, or a world other than "
             "MPI's)";
    case ncclInvalidUsage:
      return "invalid usage (emulated NCCL: MPI not initialised, a group over two streams, or a collective inside "
             "a group)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (emulated)";
  }
  return "unknown result";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device entropy;
  for (char& c : id->internal) c = static_cast<char>(entropy());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (comm == nullptr) return ncclInvalidArgument;
  if (!initialised) return ncclInvalidUsage;
  int worldSize = 0, worldRank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  if (nranks != worldSize || rank != worldRank) return ncclInvalidArgument;
  auto made = std::make_unique<ncclComm>();
  if (MPI_Comm_dup(MPI_COMM_WORLD, &made->mpi) != MPI_SUCCESS) return ncclSystemError;
  made->rank = rank;
  made->size = nranks;
  // Every rank must hold the same id (the bootstrap's broadcast): the largest and smallest
  // of its bytes, over the ranks, agree.
  unsigned char bytes[sizeof(id.internal)], low[sizeof(id.internal)], high[sizeof(id.internal)];
  std::memcpy(bytes, id.internal, sizeof(bytes));
  const int n = static_cast<int>(sizeof(bytes));
  if (MPI_Allreduce(bytes, low, n, MPI_UNSIGNED_CHAR, MPI_MIN, made->mpi) != MPI_SUCCESS ||
      MPI_Allreduce(bytes, high, n, MPI_UNSIGNED_CHAR, MPI_MAX, made->mpi) != MPI_SUCCESS) {
    MPI_Comm_free(&made->mpi);
    return ncclSystemError;
  }
  if (std::memcmp(low, high, sizeof(low)) != 0) {
    MPI_Comm_free(&made->mpi);
    return ncclInvalidArgument;
  }
  *comm = made.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// The job is ending (the bootstrap's MPI_Abort follows): no collective MPI_Comm_free.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeSize(datatype);
  if (!usable(comm) || mpiType(datatype) == MPI_DATATYPE_NULL || mpiOp(op) == MPI_OP_NULL || count > INT_MAX) {
    return ncclInvalidArgument;
  }
  if (groupDepth > 0) return ncclInvalidUsage;
  if (count == 0) return ncclSuccess;
  hostView(sendbuff, bytes);
  hostView(recvbuff, bytes);
  enqueue(stream, [=] {
    void* out = hostView(recvbuff, bytes);
    const void* in = sendbuff == recvbuff ? MPI_IN_PLACE : hostView(sendbuff, bytes);
    checkMpi(MPI_Allreduce(in, out, static_cast<int>(count), mpiType(datatype), mpiOp(op), comm->mpi), "MPI_Allreduce");
  });
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeSize(datatype);
  if (!usable(comm) || root < 0 || root >= comm->size || typeSize(datatype) == 0 || !fits(bytes)) {
    return ncclInvalidArgument;
  }
  if (groupDepth > 0) return ncclInvalidUsage;
  if (bytes == 0) return ncclSuccess;
  if (comm->rank == root) hostView(sendbuff, bytes);
  hostView(recvbuff, bytes);
  enqueue(stream, [=] {
    void* out = hostView(recvbuff, bytes);
    if (comm->rank == root && sendbuff != recvbuff) std::memmove(out, hostView(sendbuff, bytes), bytes);
    checkMpi(MPI_Bcast(out, static_cast<int>(bytes), MPI_BYTE, root, comm->mpi), "MPI_Bcast");
  });
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = sendcount * typeSize(datatype);
  if (!usable(comm) || typeSize(datatype) == 0 || !fits(bytes * static_cast<size_t>(comm->size))) {
    return ncclInvalidArgument;
  }
  if (groupDepth > 0) return ncclInvalidUsage;
  if (bytes == 0) return ncclSuccess;
  const size_t total = bytes * static_cast<size_t>(comm->size);
  hostView(sendbuff, bytes);
  hostView(recvbuff, total);
  enqueue(stream, [=] {
    char* out = static_cast<char*>(hostView(recvbuff, total));
    const bool inPlace =
        static_cast<const char*>(sendbuff) == static_cast<char*>(recvbuff) + static_cast<size_t>(comm->rank) * bytes;
    const void* in = inPlace ? MPI_IN_PLACE : hostView(sendbuff, bytes);
    const int n = static_cast<int>(bytes);
    checkMpi(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm->mpi), "MPI_Allgather");
  });
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return pointToPoint(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return pointToPoint(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0) return ncclInvalidUsage;
  if (--groupDepth > 0) return ncclSuccess;
  post(std::exchange(grouped, {}));
  return ncclSuccess;
}
