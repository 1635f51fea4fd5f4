#include "comm/SmallAllReduce.h"

#include "comm/ExchangeSchedule.h"
#include "framework/core/Error.h"

#include <cstring>
#include <vector>

namespace aps::comm {

void allGatherBytes(Transport& transport, std::span<const void* const> mine, size_t bytes, void* all) {
  APS_CHECK(mine.size() == static_cast<size_t>(transport.localRankCount()),
            "comm allGatherBytes: got {} buffers for {} local ranks", mine.size(), transport.localRankCount());
  if (bytes == 0) return;
  ScratchArena unused;
  ExchangeSchedule s(transport, {}, unused);
  const auto w = static_cast<size_t>(s.worldSize());
  std::vector<size_t> counts(w, bytes), offsets(w);
  for (size_t r = 0; r < w; ++r) offsets[r] = r * bytes;
  s.allGatherShared(std::vector<const void*>(mine.begin(), mine.end()), counts, offsets, all);
}

void smallAllReduce(Transport& transport, std::span<float* const> data, int64_t n, ReduceOp op) {
  APS_CHECK(data.size() == static_cast<size_t>(transport.localRankCount()),
            "comm smallAllReduce: got {} buffers for {} local ranks", data.size(), transport.localRankCount());
  APS_CHECK(n >= 0, "comm smallAllReduce: negative count {}", n);
  if (n == 0) return;
  const auto w = static_cast<size_t>(transport.worldSize());
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> gathered(static_cast<size_t>(n) * w);
  allGatherBytes(transport, std::vector<const void*>(data.begin(), data.end()), bytes, gathered.data());
  float* out = data[0];
  std::memcpy(out, gathered.data(), bytes);
  for (size_t r = 1; r < w; ++r) {
    const float* x = gathered.data() + r * static_cast<size_t>(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (op) {
        case ReduceOp::Sum:
          out[i] += x[i];
          break;
        case ReduceOp::Max:
          out[i] = x[i] > out[i] ? x[i] : out[i];
          break;
        case ReduceOp::Min:
          out[i] = x[i] < out[i] ? x[i] : out[i];
          break;
      }
    }
  }
  for (size_t i = 1; i < data.size(); ++i) std::memcpy(data[i], out, bytes);
}

void broadcastFromRankZero(Transport& transport, void* data, size_t bytes) {
  std::vector<Message> round;
  for (int r = 1; r < transport.worldSize(); ++r) {
    if (transport.isLocal(0) && transport.isLocal(r)) continue;  // one process: one copy of data
    round.push_back({0, r, transport.isLocal(0) ? data : nullptr, transport.isLocal(r) ? data : nullptr, bytes});
  }
  transport.exchange(round);
}

void gatherToRankZero(Transport& transport, std::span<const void* const> mine, size_t bytes,
                      std::span<void* const> gathered) {
  APS_CHECK(mine.size() == static_cast<size_t>(transport.localRankCount()),
            "comm gatherToRankZero: got {} buffers for {} local ranks", mine.size(), transport.localRankCount());
  const bool root = transport.isLocal(0);
  APS_CHECK(!root || gathered.size() == static_cast<size_t>(transport.worldSize()),
            "comm gatherToRankZero: rank 0 needs {} buffers, got {}", transport.worldSize(), gathered.size());
  const int first = transport.firstLocalRank();
  std::vector<Message> round;
  for (int r = 0; r < transport.worldSize(); ++r) {
    const bool local = transport.isLocal(r);
    if (local && root) {  // both ends in this process
      if (bytes > 0) std::memcpy(gathered[static_cast<size_t>(r)], mine[static_cast<size_t>(r - first)], bytes);
      continue;
    }
    if (!local && !root) continue;
    round.push_back({r, 0, local ? mine[static_cast<size_t>(r - first)] : nullptr,
                     root ? gathered[static_cast<size_t>(r)] : nullptr, bytes});
  }
  transport.exchange(round);
}

}  // namespace aps::comm
