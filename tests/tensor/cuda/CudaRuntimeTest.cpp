#include "framework/tensor/cuda/CudaRuntime.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

TEST(CudaRuntime, FillsOnTheDevice) {
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<float> host(1000, 0.0f);
  aps::cuda::fillOnDevice(host.data(), static_cast<int64_t>(host.size()), 2.5f);
  for (float v : host) ASSERT_EQ(v, 2.5f);
}

}  // namespace
