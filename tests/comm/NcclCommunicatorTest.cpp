// The NCCL communicator on real GPUs (label cuda; skipped without one). One rank per GPU:
// on a one-GPU machine it runs with one rank, and with two ranks it must refuse to share the GPU.
#include "comm/NcclCommunicator.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using aps::Device;
using aps::Tensor;

TEST(NcclCommunicator, ReducesGathersAndExchangesOnTheGpu) {
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  aps::comm::MpiCommunicator mpi;
  if (mpi.ranksOnNode() > aps::cuda::deviceCount()) {
    EXPECT_ERROR_NAMES(aps::comm::NcclCommunicator{mpi}, "start one rank per GPU");
    return;
  }
  aps::comm::NcclCommunicator nccl(mpi);
  const int n = nccl.size(), r = nccl.rank();
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + static_cast<float>(r);
  Tensor data = Tensor::fromVector(values, {1000}).to(Device::cuda(nccl.device()));
  nccl.allReduce(data.data<float>(), data.numel(), aps::comm::ReduceOp::Sum);
  const std::vector<float> sum = data.toFloatVector();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(sum[i], static_cast<float>(n) * static_cast<float>(i) + static_cast<float>(n * (n - 1) / 2));
  }
  // One exchange round: every rank sends its rank to the next and receives from the previous
  // (on one rank, a message to itself, which carries both its pointers: Transport.h).
  Tensor mine = Tensor::fromVector({static_cast<float>(r)}, {1}).to(Device::cuda(nccl.device()));
  Tensor got = Tensor::zeros({1}, aps::DType::Float32, Device::cuda(nccl.device()));
  std::vector<aps::comm::Message> round;
  if (n == 1) {
    round.push_back({r, r, mine.data<float>(), got.data<float>(), sizeof(float)});
  } else {
    round.push_back({r, (r + 1) % n, mine.data<float>(), nullptr, sizeof(float)});
    round.push_back({(r + n - 1) % n, r, nullptr, got.data<float>(), sizeof(float)});
  }
  nccl.exchange(round);
  EXPECT_EQ(got.item(), static_cast<float>((r + n - 1) % n));
  std::string why;
  const bool fp8 = aps::comm::NcclCommunicator::nativeFp8Supported(nccl.device(), &why);
  std::printf("NCCL %s, native FP8 all-reduce: %s\n", aps::comm::NcclCommunicator::ncclVersion().c_str(),
              fp8 ? "available" : why.c_str());
  nccl.barrier();
}

}  // namespace
