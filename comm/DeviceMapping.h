#pragma once

#include <string>

namespace aps::comm {

// The GPU of a rank on a multi-GPU node: one GPU per rank, the node-local rank's. `what` names
// the setting for errors. Throws aps::Error when the node runs more ranks than it has GPUs
// (NCCL refuses two ranks of one communicator on one GPU) or has none.
int deviceForLocalRank(int localRank, int ranksOnNode, int deviceCount, const std::string& what);

}  // namespace aps::comm
