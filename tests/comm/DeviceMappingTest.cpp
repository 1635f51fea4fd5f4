#include "comm/DeviceMapping.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

namespace {

using aps::comm::deviceForLocalRank;

TEST(DeviceMapping, EachRankOnANodeGetsItsOwnGpu) {
  for (int local = 0; local < 8; ++local) EXPECT_EQ(deviceForLocalRank(local, 8, 8, "test"), local);
  EXPECT_EQ(deviceForLocalRank(1, 2, 8, "test"), 1);  // fewer ranks than GPUs: the first ones
}

TEST(DeviceMapping, MoreRanksThanGpusOrNoGpuIsRefusedWithTheFix) {
  EXPECT_ERROR_NAMES(deviceForLocalRank(0, 4, 1, "comm.backend: nccl"),
                     "comm.backend: nccl: 4 ranks run on this node but it has 1 CUDA device; start one rank per GPU");
  EXPECT_ERROR_NAMES(deviceForLocalRank(0, 1, 0, "comm.backend: nccl"), "has no visible CUDA device");
}

}  // namespace
