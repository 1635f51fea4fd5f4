#pragma once

#include <cstdint>
#include <vector>

namespace aps::data {

// Splits a dataset's indices over the ranks of a data-parallel job the way PyTorch's
// torch.utils.data.distributed.DistributedSampler does:
//  - shuffle: one permutation of [0, size) per epoch, seeded by (seed, epoch) alone, so every
//    rank computes the same permutation and every run repeats it (Fisher-Yates on a Philox
//    stream; PyTorch's torch.randperm bits are not reproduced);
//  - dropLast = false: the list is padded by repeating its head until it divides evenly
//    (numSamples = ceil(size / replicas)); dropLast = true: the tail is dropped
//    (numSamples = floor(size / replicas));
//  - rank k takes positions k, k + replicas, k + 2 * replicas, ...
// shard(rank, epoch) gives any rank's share, so a simulated communicator's virtual rank k
// reads exactly what real rank k reads.
class DistributedSampler {
 public:
  DistributedSampler(int64_t datasetSize, int numReplicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool dropLast = false);

  // This rank's indices for `epoch`.
  std::vector<int64_t> indices(uint64_t epoch) const { return shard(rank_, epoch); }
  // Rank `rank`'s indices for `epoch` (any rank in [0, numReplicas)).
  std::vector<int64_t> shard(int rank, uint64_t epoch) const;
  // shard(r, epoch) of ranks r = first, ..., first + count - 1, from one epoch order (the
  // simulator's ranks: one shuffle of the dataset per epoch, not one per rank).
  std::vector<std::vector<int64_t>> shards(int first, int count, uint64_t epoch) const;
  // The whole padded/truncated epoch order before it is dealt to ranks (totalSize entries).
  std::vector<int64_t> epochOrder(uint64_t epoch) const;

  int64_t numSamples() const { return numSamples_; }  // per rank
  int64_t totalSize() const { return numSamples_ * numReplicas_; }
  int numReplicas() const { return numReplicas_; }
  int rank() const { return rank_; }

 private:
  int64_t datasetSize_;
  int numReplicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool dropLast_;
  int64_t numSamples_;
};

}  // namespace aps::data
