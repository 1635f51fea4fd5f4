#include "comm/SimTransport.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <cstring>

namespace aps::comm {

SimTransport::SimTransport(int worldSize, Device device) : worldSize_(worldSize), device_(device) {
  APS_CHECK(worldSize >= 1, "comm sim: world size must be at least 1, got {}", worldSize);
}

void SimTransport::exchange(std::span<const Message> round) {
  if (device_.isCuda()) {
    for (const Message& m : round) {
      APS_ASSERT(m.src >= 0 && m.src < worldSize_ && m.dst >= 0 && m.dst < worldSize_);
      if (m.bytes == 0 || m.recvData == m.sendData) continue;
      cuda::copyAsync(m.recvData, m.sendData, m.bytes, cuda::CopyKind::DeviceToDevice, cuda::currentStream());
    }
    return;
  }
  // A schedule never reads a receive buffer in the round that fills it, nor overwrites a
  // send buffer before the round ends, so copying in list order is a faithful delivery, and
  // so is copying in any order: a large round (256 simulated ranks' all-to-all is 65536
  // messages) is split over the threads.
  parallelFor(static_cast<int64_t>(round.size()), 1024, [&](int64_t m0, int64_t m1) {
    for (int64_t k = m0; k < m1; ++k) {
      const Message& m = round[static_cast<size_t>(k)];
      APS_ASSERT(m.src >= 0 && m.src < worldSize_ && m.dst >= 0 && m.dst < worldSize_);
      if (m.bytes == 0 || m.recvData == m.sendData) continue;
      std::memmove(m.recvData, m.sendData, m.bytes);
    }
  });
}

}  // namespace aps::comm
