#include "comm/SimTransport.h"

#include "framework/core/Error.h"

#include <cstring>

namespace aps::comm {

SimTransport::SimTransport(int worldSize) : worldSize_(worldSize) {
  APS_CHECK(worldSize >= 1, "comm sim: world size must be at least 1, got {}", worldSize);
}

void SimTransport::exchange(std::span<const Message> round) {
  // A schedule never reads a receive buffer in the round that fills it, nor overwrites a
  // send buffer before the round ends, so copying in list order is a faithful delivery.
  for (const Message& m : round) {
    APS_ASSERT(m.src >= 0 && m.src < worldSize_ && m.dst >= 0 && m.dst < worldSize_);
    if (m.bytes == 0 || m.recvData == m.sendData) continue;
    std::memmove(m.recvData, m.sendData, m.bytes);
  }
}

}  // namespace aps::comm
