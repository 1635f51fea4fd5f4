#pragma once

#include "comm/ReduceOp.h"
#include "comm/Transport.h"

#include <cstdint>
#include <span>

namespace aps::comm {

// An all-reduce for a few values (one per layer: APS exponents, loss-scale votes, metrics):
// every rank all-gathers every rank's values in fp32 and combines them in rank order, so
// every rank, real or simulated, gets the same bits. Sends (N-1) * n * 4 bytes per rank;
// use an AllReduceAlgorithm for gradients.
// data[i] holds n floats of local rank transport.firstLocalRank() + i.
void smallAllReduce(Transport& transport, std::span<float* const> data, int64_t n, ReduceOp op);

// Every rank receives every rank's `bytes`: mine[i] holds local rank
// transport.firstLocalRank() + i's, and all[r * bytes ...] receives rank r's (worldSize() *
// bytes in all). One code path for real and simulated ranks.
void allGatherBytes(Transport& transport, std::span<const void* const> mine, size_t bytes, void* all);

// Every process's `data` (bytes) becomes rank 0's, through one exchange round: rank 0 sends
// to each rank that lives in another process. The local ranks of one process share `data`
// (simulated ranks share one model), so nothing moves between them.
void broadcastFromRankZero(Transport& transport, void* data, size_t bytes);

// Gathers every rank's `bytes` at rank 0, through one exchange round: mine[i] holds local
// rank transport.firstLocalRank() + i's bytes; where rank 0 lives, gathered[r] receives rank
// r's (gathered must then hold worldSize() buffers); elsewhere `gathered` is ignored.
void gatherToRankZero(Transport& transport, std::span<const void* const> mine, size_t bytes,
                      std::span<void* const> gathered);

}  // namespace aps::comm
