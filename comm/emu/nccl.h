#pragma once

// The NCCL API that aps calls (comm/NcclCommunicator.cpp), for the emulated device's build
// (APS_CUDA_EMULATION=ON; docs/INTERNALS.md, "The emulated CUDA device"): the same names,
// types and meanings as NCCL's nccl.h, served by comm/emu/NcclEmu.cpp between processes over
// MPI on the emulated device's memory. Only the build of aps_comm in that tree sees this
// header; a CUDA build includes the toolkit's.

#include <cstddef>

struct CUstream_st;
using cudaStream_t = CUstream_st*;

struct ncclComm;
using ncclComm_t = ncclComm*;

struct ncclUniqueId {
  char internal[128];
};

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

// 0: the host's emulation (a real NCCL gives major * 10000 + minor * 100 + patch).
ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);

// A communicator spans MPI's whole world (the emulation serves no other), rank for rank; every
// rank must pass the id one of them made (ncclInvalidArgument otherwise).
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);

// Queued on `stream`, in order with the work before them there; buffers are device memory.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
// Sends and receives between them are posted together at ncclGroupEnd, so that a rank may
// send to one neighbour while it receives from another.
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
