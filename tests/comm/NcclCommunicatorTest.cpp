// The NCCL communicator on real GPUs (label cuda; skipped without one), and in the emulated
// device's build on NCCL served over MPI. One rank per GPU: with more ranks on a node than it
// has GPUs it must refuse to share one. APS_NCCL_TEST_EXPECT_RANKS=N (the emulated runs of
// 2 and 4 ranks, each with a device of its own) requires that the checks ran on N ranks.
#include "comm/NcclCommunicator.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <span>
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
  if (const char* expect = std::getenv("APS_NCCL_TEST_EXPECT_RANKS")) {
    ASSERT_EQ(n, std::atoi(expect));
  }
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

  // Broadcast from the last rank, all-gather of every rank's pair, and an all-to-all where
  // rank r sends d + 1 bytes of value 10 r + d to rank d.
  const Device device = Device::cuda(nccl.device());
  Tensor fromLast = Tensor::fromVector({static_cast<float>(r), 7.5f}, {2}).to(device);
  nccl.broadcast(fromLast.data<float>(), 2 * sizeof(float), n - 1);
  EXPECT_EQ(fromLast.toFloatVector(), (std::vector<float>{static_cast<float>(n - 1), 7.5f}));
  Tensor pair = Tensor::fromVector({static_cast<float>(r), static_cast<float>(-r)}, {2}).to(device);
  Tensor all = Tensor::zeros({2 * n}, aps::DType::Float32, device);
  nccl.allGather(pair.data<float>(), 2 * sizeof(float), all.data<float>());
  const std::vector<float> gathered = all.toFloatVector();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(gathered[static_cast<size_t>(2 * k)], static_cast<float>(k));
    EXPECT_EQ(gathered[static_cast<size_t>(2 * k + 1)], static_cast<float>(-k));
  }
  std::vector<size_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
  std::vector<uint8_t> outgoing;
  size_t received = 0;
  for (int d = 0; d < n; ++d) {
    sendOffsets.push_back(outgoing.size());
    sendCounts.push_back(static_cast<size_t>(d + 1));
    outgoing.insert(outgoing.end(), static_cast<size_t>(d + 1), static_cast<uint8_t>(10 * r + d));
    recvOffsets.push_back(received);
    recvCounts.push_back(static_cast<size_t>(r + 1));
    received += static_cast<size_t>(r + 1);
  }
  Tensor sendBytes =
      Tensor::fromVector(std::span<const uint8_t>(outgoing), {static_cast<int64_t>(outgoing.size())}).to(device);
  Tensor recvBytes = Tensor::zeros({static_cast<int64_t>(received)}, aps::DType::UInt8, device);
  nccl.allToAllV(sendBytes.rawData(), sendCounts, sendOffsets, recvBytes.rawData(), recvCounts, recvOffsets);
  const std::vector<uint8_t> incoming = recvBytes.toVector<uint8_t>();
  for (int src = 0; src < n; ++src) {
    for (size_t k = 0; k < recvCounts[static_cast<size_t>(src)]; ++k) {
      EXPECT_EQ(incoming[recvOffsets[static_cast<size_t>(src)] + k], static_cast<uint8_t>(10 * src + r))
          << "from rank " << src;
    }
  }
  std::string why;
  const bool fp8 = aps::comm::NcclCommunicator::nativeFp8Supported(nccl.device(), &why);
  std::printf("NCCL %s, native FP8 all-reduce: %s\n", aps::comm::NcclCommunicator::ncclVersion().c_str(),
              fp8 ? "available" : why.c_str());
  nccl.barrier();
}

}  // namespace
