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

}  // namespace aps::comm
