#pragma once

#include "comm/Transport.h"

namespace aps::comm {

// The simulated backend: a world of N virtual ranks that all live in this process, so a
// round of messages is a set of in-memory copies. Running an AllReduceAlgorithm on it with
// the N ranks' buffers yields, for every rank, the bits `mpirun -np N` would produce.
class SimTransport final : public Transport {
 public:
  explicit SimTransport(int worldSize);

  std::string transportName() const override { return "sim"; }
  int worldSize() const override { return worldSize_; }
  int firstLocalRank() const override { return 0; }
  int localRankCount() const override { return worldSize_; }

  void exchange(std::span<const Message> round) override;
  bool sharesMemory() const override { return true; }

 private:
  int worldSize_;
};

}  // namespace aps::comm
