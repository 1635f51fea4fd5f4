// The mpi backend's collectives, run under mpirun with 2, 3 and 4 ranks. Tests use EXPECT
// (never ASSERT) before collective calls so that a failing rank still joins them.
#include "comm/MpiCommunicator.h"
#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace aps::comm {
namespace {

TEST(MpiCommunicator, RankAndSize) {
  MpiCommunicator comm;
  EXPECT_GE(comm.size(), 1);
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.size());
  EXPECT_GE(MpiCommunicator::threadLevel(), MPI_THREAD_SERIALIZED);
  EXPECT_EQ(comm.worldSize(), comm.size());
  EXPECT_EQ(comm.firstLocalRank(), comm.rank());
  comm.barrier();
}

// The trainer's small collectives through the transport, between real ranks.
TEST(MpiCommunicator, GatherToRankZeroAndBroadcastFromRankZero) {
  MpiCommunicator comm;
  const int n = comm.size(), me = comm.rank();
  const std::vector<int32_t> mine{10 * me, 10 * me + 1};
  std::vector<std::vector<int32_t>> gathered(me == 0 ? static_cast<size_t>(n) : 0, std::vector<int32_t>(2, -1));
  std::vector<void*> out;
  for (auto& v : gathered) out.push_back(v.data());
  const void* in[1] = {mine.data()};
  gatherToRankZero(comm, in, 2 * sizeof(int32_t), out);
  for (int r = 0; r < static_cast<int>(gathered.size()); ++r) {
    EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<int32_t>{10 * r, 10 * r + 1})) << "rank " << r;
  }
  std::vector<uint8_t> flags(3, static_cast<uint8_t>(me == 0 ? 7 : 0));
  broadcastFromRankZero(comm, flags.data(), flags.size());
  EXPECT_EQ(flags, (std::vector<uint8_t>(3, 7)));
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator comm;
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int> v(5, comm.rank() == root ? 100 + root : -1);
    comm.broadcast(v.data(), v.size() * sizeof(int), root);
    for (int x : v) EXPECT_EQ(x, 100 + root);
  }
}

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  MpiCommunicator comm;
  const int n = comm.size();
  std::vector<float> sum{1.0f, static_cast<float>(comm.rank())};
  std::vector<float> mx{static_cast<float>(comm.rank()), -static_cast<float>(comm.rank())};
  std::vector<float> mn = mx;
  comm.allReduce(sum.data(), 2, ReduceOp::Sum);
  comm.allReduce(mx.data(), 2, ReduceOp::Max);
  comm.allReduce(mn.data(), 2, ReduceOp::Min);
  EXPECT_EQ(sum[0], static_cast<float>(n));
  EXPECT_EQ(sum[1], static_cast<float>(n * (n - 1) / 2));
  EXPECT_EQ(mx[0], static_cast<float>(n - 1));
  EXPECT_EQ(mx[1], 0.0f);
  EXPECT_EQ(mn[0], 0.0f);
  EXPECT_EQ(mn[1], -static_cast<float>(n - 1));
}

TEST(MpiCommunicator, AllGatherAndAllToAllV) {
  MpiCommunicator comm;
  const int n = comm.size();
  const int me = comm.rank();
  std::vector<int> gathered(static_cast<size_t>(n), -1);
  const int mine = 10 * me;
  comm.allGather(&mine, sizeof mine, gathered.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[static_cast<size_t>(r)], 10 * r);

  // Rank s sends s + d + 1 bytes, each equal to (s * 16 + d), to rank d.
  std::vector<size_t> sc(static_cast<size_t>(n)), so(sc.size()), rc(sc.size()), ro(sc.size());
  size_t sendTotal = 0, recvTotal = 0;
  for (int d = 0; d < n; ++d) {
    sc[static_cast<size_t>(d)] = static_cast<size_t>(me + d + 1);
    so[static_cast<size_t>(d)] = sendTotal;
    sendTotal += sc[static_cast<size_t>(d)];
    rc[static_cast<size_t>(d)] = static_cast<size_t>(d + me + 1);
    ro[static_cast<size_t>(d)] = recvTotal;
    recvTotal += rc[static_cast<size_t>(d)];
  }
  std::vector<uint8_t> send(sendTotal), recv(recvTotal, 0xff);
  for (int d = 0; d < n; ++d)
    for (size_t i = 0; i < sc[static_cast<size_t>(d)]; ++i)
      send[so[static_cast<size_t>(d)] + i] = static_cast<uint8_t>(me * 16 + d);
  comm.allToAllV(send.data(), sc, so, recv.data(), rc, ro);
  for (int s = 0; s < n; ++s)
    for (size_t i = 0; i < rc[static_cast<size_t>(s)]; ++i)
      EXPECT_EQ(recv[ro[static_cast<size_t>(s)] + i], static_cast<uint8_t>(s * 16 + me));
}

TEST(MpiCommunicator, SendRecvAroundTheRing) {
  MpiCommunicator comm;
  const int n = comm.size();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const int next = (comm.rank() + 1) % n, prev = (comm.rank() + n - 1) % n;
  std::vector<double> out(3, comm.rank() + 0.5), in(3, -1.0);
  // Even ranks send first, odd ranks receive first: no deadlock with blocking calls.
  if (comm.rank() % 2 == 0) {
    comm.send(out.data(), 24, next, 5);
    comm.recv(in.data(), 24, prev, 5);
  } else {
    comm.recv(in.data(), 24, prev, 5);
    comm.send(out.data(), 24, next, 5);
  }
  for (double x : in) EXPECT_EQ(x, prev + 0.5);
}

TEST(MpiCommunicator, CpuBackendTakesNoStream) {
  MpiCommunicator comm;
  comm.setStream({});
  int dummy = 0;
  EXPECT_THROW(comm.setStream({&dummy}), Error);
}

}  // namespace
}  // namespace aps::comm
