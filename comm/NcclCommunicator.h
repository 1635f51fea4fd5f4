#pragma once

#include "comm/Communicator.h"
#include "comm/MpiCommunicator.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <memory>
#include <string>

namespace aps::comm {

// The Communicator of one rank on one GPU through NCCL (built with the CUDA backend, and in
// the emulated device's build, where the NCCL calls it makes are served between processes over
// MPI: comm/emu/nccl.h).
// Bootstrapped over MPI: rank 0 makes the NCCL unique id and MPI broadcasts it; the rank's
// GPU is its node-local rank's (deviceForLocalRank). Every buffer passed in is device memory.
// Work is enqueued on the communicator's own stream (or the one given to setStream, whose
// producer must record an event the stream waits on first), after the work queued before the
// call on the calling thread's current stream, and each call returns once its transfers are
// complete. A thread whose current stream is its own (cuda::StreamGuard: the reducer's
// communication thread) has its calls queued on that stream instead, returning at once: the
// transfers complete before the work it queues there next, which is the Transport's delivery
// for device memory (Transport::exchange). Encoded bytes move with grouped
// ncclSend/ncclRecv, float32 all-reduces with ncclAllReduce. The all-reduce schedules (ring,
// two_shot, allgather) run on it unchanged over device buffers (AllReduceOptions::device):
// their codecs' device forms, scratch from the caching allocator.
class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MpiCommunicator& bootstrap);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string backend() const override { return "nccl"; }
  std::string transportName() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranksOnNode() const override { return bootstrap_.ranksOnNode(); }
  int device() const { return device_; }

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

  // NCCL's version as "2.28.9" ("emulated" in the emulated device's build).
  static std::string ncclVersion();
  // Whether NCCL can all-reduce FP8 (E4M3/E5M2) natively on `device`: NCCL >= 2.24 and a GPU of
  // compute capability 9.0 or newer; otherwise the reason it cannot, in `why`.
  static bool nativeFp8Supported(int device, std::string* why = nullptr);

 private:
  void waitForCompute();  // the stream waits for the caller's current stream's work so far
  void finish();          // waits for the enqueued work
  // The stream a call's work goes on (see above), and the wait for it where there is one.
  cuda::StreamHandle begin();
  void end(cuda::StreamHandle used);

  MpiCommunicator& bootstrap_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  void* comm_ = nullptr;                     // ncclComm_t
  std::unique_ptr<cuda::Stream> ownStream_;  // made here
  cuda::StreamHandle stream_ = nullptr;      // the stream work goes on
  bool streamOrdered_ = true;                // a thread's own stream may carry its calls
};

// NcclCommunicator over `bootstrap`, which must outlive it, with this process's GPU made the
// calling thread's device (cuda::currentDevice()); in a build without CUDA, aps::Error saying so.
// For code that builds in every configuration (the trainer).
std::unique_ptr<Communicator> makeNcclCommunicator(MpiCommunicator& bootstrap);

}  // namespace aps::comm
