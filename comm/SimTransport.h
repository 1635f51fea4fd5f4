#pragma once

#include "comm/Transport.h"
#include "framework/tensor/Device.h"

namespace aps::comm {

// The simulated backend: a world of N virtual ranks that all live in this process, so a
// round of messages is a set of in-memory copies. Running an AllReduceAlgorithm on it with
// the N ranks' buffers yields, for every rank, the bits `mpirun -np N` would produce. On a GPU
// (`device` cuda:N) the messages are device memory and a round is device-to-device copies,
// queued on the device's default stream in list order.
class SimTransport final : public Transport {
 public:
  explicit SimTransport(int worldSize, Device device = Device::cpu());
  Device device() const { return device_; }

  std::string transportName() const override { return "sim"; }
  int worldSize() const override { return worldSize_; }
  int firstLocalRank() const override { return 0; }
  int localRankCount() const override { return worldSize_; }

  void exchange(std::span<const Message> round) override;
  bool sharesMemory() const override { return true; }

 private:
  int worldSize_;
  Device device_;
};

}  // namespace aps::comm
