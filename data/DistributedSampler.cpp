#include "data/DistributedSampler.h"

#include "data/SampleRng.h"
#include "framework/core/Error.h"

#include <numeric>
#include <utility>

namespace aps::data {

DistributedSampler::DistributedSampler(int64_t datasetSize, int numReplicas, int rank, bool shuffle, uint64_t seed,
                                       bool dropLast)
    : datasetSize_(datasetSize),
      numReplicas_(numReplicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      dropLast_(dropLast) {
  APS_CHECK(datasetSize > 0, "DistributedSampler: dataset size must be positive, got {}", datasetSize);
  APS_CHECK(numReplicas > 0, "DistributedSampler: numReplicas must be positive, got {}", numReplicas);
  APS_CHECK(rank >= 0 && rank < numReplicas, "DistributedSampler: rank {} out of range [0, {})", rank, numReplicas);
  // PyTorch: ceil((len - replicas) / replicas) when dropping an uneven tail, else ceil(len / replicas).
  if (dropLast && datasetSize % numReplicas != 0) {
    numSamples_ = datasetSize / numReplicas;
  } else {
    numSamples_ = (datasetSize + numReplicas - 1) / numReplicas;
  }
  APS_CHECK(numSamples_ > 0, "DistributedSampler: {} samples cannot give each of {} ranks one with dropLast",
            datasetSize, numReplicas);
}

std::vector<int64_t> DistributedSampler::epochOrder(uint64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(datasetSize_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    Rng rng(deriveKey(seed_, RngPurpose::kShuffle, epoch, 0));
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  }
  const auto total = static_cast<size_t>(totalSize());
  if (order.size() > total) {
    order.resize(total);
  } else {
    order.reserve(total);
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);  // repeat the head, wrapping
  }
  return order;
}

std::vector<int64_t> DistributedSampler::shard(int rank, uint64_t epoch) const {
  return std::move(shards(rank, 1, epoch).front());
}

std::vector<std::vector<int64_t>> DistributedSampler::shards(int first, int count, uint64_t epoch) const {
  APS_CHECK(count >= 1 && first >= 0 && first + count <= numReplicas_,
            "DistributedSampler: ranks [{}, {}) out of range [0, {})", first, first + count, numReplicas_);
  const std::vector<int64_t> order = epochOrder(epoch);
  std::vector<std::vector<int64_t>> all(static_cast<size_t>(count));
  for (int r = 0; r < count; ++r) {
    std::vector<int64_t>& mine = all[static_cast<size_t>(r)];
    mine.reserve(static_cast<size_t>(numSamples_));
    for (auto i = static_cast<size_t>(first + r); i < order.size(); i += static_cast<size_t>(numReplicas_)) {
      mine.push_back(order[i]);
    }
  }
  return all;
}

}  // namespace aps::data
