#include "comm/NcclCommunicator.h"

#include "comm/DeviceMapping.h"
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

namespace aps::comm {

namespace {

void checkNccl(ncclResult_t result, const char* what) {
  APS_CHECK(result == ncclSuccess, "NCCL: {} failed: {}", what, ncclGetErrorString(result));
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Sum:
      break;
  }
  return ncclSum;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap)
    : bootstrap_(bootstrap), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  device_ =
      deviceForLocalRank(bootstrap.localRank(), bootstrap.ranksOnNode(), cuda::deviceCount(), "comm.backend: nccl");
  cuda::setDevice(device_);
  ncclUniqueId id{};
  if (rank_ == 0) checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap_.broadcast(&id, sizeof(id), 0);
  ncclComm_t comm = nullptr;
  checkNccl(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_ = comm;
  ownStream_ = std::make_unique<cuda::Stream>(device_);
  stream_ = ownStream_->handle();
  // The emulated NCCL moves its bytes over MPI on the stream's thread: beside the
  // communication thread's own MPI calls only where MPI allows any thread to call it.
  streamOrdered_ = ncclVersion() != "emulated" || MpiCommunicator::threadLevel() >= MPI_THREAD_MULTIPLE;
}

std::unique_ptr<Communicator> makeNcclCommunicator(MpiCommunicator& bootstrap) {
  return std::make_unique<NcclCommunicator>(bootstrap);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

// The caller's work runs on its current stream (the default stream, where aps's ops run, or the
// reducer's communication stream), which a non-blocking stream does not wait for: without this,
// a buffer encoded or filled just before the call may be written after the transfer. Only that
// stream is waited for: a call from the communication thread does not wait for backward's kernels.
void NcclCommunicator::waitForCompute() {
  cuda::Event ready;
  ready.record(cuda::currentStream());
  ready.wait(stream_);
}

void NcclCommunicator::finish() {
  cuda::Event done;
  done.record(stream_);
  done.synchronize();
}

// A thread with a stream of its own (the reducer's communication thread) has its calls queued
// on that stream, in order with the kernels around them, and returned from at once: the
// Transport's delivery for device memory is stream order. Any other call goes on the
// communicator's stream after the caller's work, and is waited for.
cuda::StreamHandle NcclCommunicator::begin() {
  const cuda::StreamHandle current = cuda::currentStream();
  if (current != nullptr && streamOrdered_) return current;
  waitForCompute();
  return stream_;
}

void NcclCommunicator::end(cuda::StreamHandle used) {
  if (used == stream_) finish();
}

void NcclCommunicator::barrier() {
  if (cuda::currentStream() != nullptr) cuda::synchronizeStream(cuda::currentStream());
  finish();
  bootstrap_.barrier();
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  APS_CHECK(root >= 0 && root < size_, "comm broadcast: root {} is not a rank of a world of {}", root, size_);
  const cuda::StreamHandle stream = begin();
  checkNccl(ncclBroadcast(data, data, bytes, ncclUint8, root, static_cast<ncclComm_t>(comm_), stream), "ncclBroadcast");
  end(stream);
}

void NcclCommunicator::allReduce(float* data, int64_t n, ReduceOp op) {
  const cuda::StreamHandle stream = begin();
  checkNccl(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclOp(op), static_cast<ncclComm_t>(comm_),
                          stream),
            "ncclAllReduce");
  end(stream);
}

void NcclCommunicator::allGather(const void* in, size_t bytes, void* out) {
  const cuda::StreamHandle stream = begin();
  checkNccl(ncclAllGather(in, out, bytes, ncclUint8, static_cast<ncclComm_t>(comm_), stream), "ncclAllGather");
  end(stream);
}

void NcclCommunicator::allToAllV(const void* send, std::span<const size_t> sendCounts,
                                 std::span<const size_t> sendOffsets, void* recv, std::span<const size_t> recvCounts,
                                 std::span<const size_t> recvOffsets) {
  const auto n = static_cast<size_t>(size_);
  APS_CHECK(sendCounts.size() == n && sendOffsets.size() == n && recvCounts.size() == n && recvOffsets.size() == n,
            "comm allToAllV: counts and offsets need {} entries each", n);
  const cuda::StreamHandle stream = begin();
  auto comm = static_cast<ncclComm_t>(comm_);
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  for (size_t r = 0; r < n; ++r) {
    if (sendCounts[r] > 0) {
      checkNccl(ncclSend(static_cast<const char*>(send) + sendOffsets[r], sendCounts[r], ncclUint8, static_cast<int>(r),
                         comm, stream),
                "ncclSend");
    }
    if (recvCounts[r] > 0) {
      checkNccl(ncclRecv(static_cast<char*>(recv) + recvOffsets[r], recvCounts[r], ncclUint8, static_cast<int>(r), comm,
                         stream),
                "ncclRecv");
    }
  }
  checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  end(stream);
}

// NCCL has no tags: messages between two ranks match in the order they are posted, which is
// what the schedules rely on anyway (Transport::exchange).
void NcclCommunicator::send(const void* data, size_t bytes, int dst, int /*tag*/) {
  const cuda::StreamHandle stream = begin();
  checkNccl(ncclSend(data, bytes, ncclUint8, dst, static_cast<ncclComm_t>(comm_), stream), "ncclSend");
  end(stream);
}

void NcclCommunicator::recv(void* data, size_t bytes, int src, int /*tag*/) {
  const cuda::StreamHandle stream = begin();
  checkNccl(ncclRecv(data, bytes, ncclUint8, src, static_cast<ncclComm_t>(comm_), stream), "ncclRecv");
  end(stream);
}

void NcclCommunicator::setStream(StreamHandle stream) {
  stream_ = stream.native != nullptr ? static_cast<cuda::StreamHandle>(stream.native) : ownStream_->handle();
}

void NcclCommunicator::abort(const std::string& why) {
  if (comm_ != nullptr) ncclCommAbort(static_cast<ncclComm_t>(comm_));
  comm_ = nullptr;
  bootstrap_.abort(why);
}

// One round as one NCCL group: every send and receive of this rank is posted, then NCCL runs
// them concurrently (a ring hop sends to one neighbour while receiving from the other).
void NcclCommunicator::exchange(std::span<const Message> round) {
  const cuda::StreamHandle stream = begin();
  auto comm = static_cast<ncclComm_t>(comm_);
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  for (const Message& m : round) {
    if (m.bytes == 0 || m.src == m.dst) continue;
    if (m.src == rank_) checkNccl(ncclSend(m.sendData, m.bytes, ncclUint8, m.dst, comm, stream), "ncclSend");
    if (m.dst == rank_) checkNccl(ncclRecv(m.recvData, m.bytes, ncclUint8, m.src, comm, stream), "ncclRecv");
  }
  checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  // A message to itself is a device copy, ordered on the same stream.
  for (const Message& m : round) {
    if (m.bytes > 0 && m.src == rank_ && m.dst == rank_) {
      APS_CHECK(m.sendData != nullptr && m.recvData != nullptr,
                "nccl exchange: rank {}'s message to itself ({} bytes) needs both its send and its receive buffer",
                rank_, m.bytes);
      cuda::copyAsync(m.recvData, m.sendData, m.bytes, cuda::CopyKind::DeviceToDevice, stream);
    }
  }
  end(stream);
}

std::string NcclCommunicator::ncclVersion() {
  int code = 0;
  checkNccl(ncclGetVersion(&code), "ncclGetVersion");
  if (code == 0) return "emulated";  // the host's NCCL of the emulated device (comm/emu/nccl.h)
  // Since 2.9 the code is major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

bool NcclCommunicator::nativeFp8Supported(int device, std::string* why) {
  int code = 0;
  checkNccl(ncclGetVersion(&code), "ncclGetVersion");
  if (code < 22400) {
    if (why != nullptr) *why = "NCCL " + ncclVersion() + " has no FP8 reductions (2.24 has)";
    return false;
  }
  const int capability = cuda::computeCapability(device);
  if (capability < 90) {
    if (why != nullptr)
      *why = "the GPU is sm_" + std::to_string(capability) + "; NCCL's FP8 reductions need sm_90 or newer";
    return false;
  }
  return true;
}

}  // namespace aps::comm
