#include "comm/DeviceMapping.h"

#include "framework/core/Error.h"

namespace aps::comm {

int deviceForLocalRank(int localRank, int ranksOnNode, int deviceCount, const std::string& what) {
  APS_CHECK(deviceCount > 0, "{}: this node has no visible CUDA device", what);
  APS_CHECK(ranksOnNode <= deviceCount,
            "{}: {} ranks run on this node but it has {} CUDA device{}; start one rank per GPU (e.g. mpirun -np {} per "
            "node, or srun --gpus-per-task=1)",
            what, ranksOnNode, deviceCount, deviceCount == 1 ? "" : "s", deviceCount);
  APS_CHECK(localRank >= 0 && localRank < ranksOnNode, "{}: node-local rank {} is outside 0..{}", what, localRank,
            ranksOnNode - 1);
  return localRank;
}

}  // namespace aps::comm
