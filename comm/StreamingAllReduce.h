#pragma once

#include "comm/AllReduceAlgorithm.h"
#include "comm/RankOrderSum.h"

#include <chrono>
#include <memory>
#include <vector>

namespace aps::comm {

// A simulated world at any scale: the ranks' buffers arrive one at a time, in rank order,
// and are folded into the state the receivers of the schedule would build, so memory is
// O(n) instead of O(N n). The result has the bits every rank of the SimTransport schedule
// (and so of `mpirun -np N`) ends with: the same codec calls with the same encode contexts
// in the same order (TwoShotAllReduce / AllGatherAllReduce phases, RankOrderSum), which the
// tests check against the schedule. Supports two_shot, allgather and native; a ring's
// partial sums start at a different rank for each chunk, so it needs SimTransport.
//
//   StreamingAllReduce s(options, codec, worldSize);
//   s.begin(n, ctx);
//   for (rank = 0; rank < worldSize; ++rank) { compute rank's gradient g; s.add(g); }
//   SyncStats stats = s.finish(out);
class StreamingAllReduce {
 public:
  StreamingAllReduce(const AllReduceOptions& options, std::shared_ptr<const precision::Codec> codec, int worldSize);

  int worldSize() const { return world_; }
  void begin(int64_t n, const precision::EncodeContext& ctx = {});
  // The next rank's n values (rank 0 first).
  void add(const float* data);
  // Writes the reduced values; stats.bytesSent has one entry per rank (what each would send),
  // stats.seconds the time spent in add and finish.
  SyncStats finish(float* out);

 private:
  void addTwoShot(int rank, const float* data);

  AllReduceOptions options_;
  std::shared_ptr<const precision::Codec> codec_;
  int world_;
  int64_t n_ = -1;
  int next_ = 0;
  precision::EncodeContext ctx_;
  bool nonFinite_ = false;
  double seconds_ = 0.0;
  std::vector<RankOrderSum> chunkSums_;  // two_shot: one per chunk owner
  std::unique_ptr<RankOrderSum> sum_;    // allgather
  std::vector<uint8_t> encoded_;
};

}  // namespace aps::comm
