#include "comm/StreamingGradientReducer.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace aps::comm {

namespace {

std::vector<int64_t> countsOf(const std::vector<NamedGradient>& grads) {
  std::vector<int64_t> counts;
  for (const NamedGradient& g : grads) counts.push_back(g.grad.count);
  return counts;
}

}  // namespace

StreamingGradientReducer::StreamingGradientReducer(int worldSize, std::vector<NamedGradient> grads,
                                                   std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms,
                                                   std::vector<int> formats, ReducerOptions options)
    : world_(worldSize),
      options_(std::move(options)),
      grads_(std::move(grads)),
      layout_(countsOf(grads_), formats.empty() ? std::vector<int>(grads_.size(), 0) : formats, options_.bucketCapBytes,
              options_.firstBucketCapBytes) {
  APS_CHECK(worldSize >= 1, "comm streaming reducer: world size must be at least 1, got {}", worldSize);
  APS_CHECK(!options_.beforeReduce && !options_.afterReduce,
            "comm streaming reducer: bucket hooks need every rank's gradients at once; use GradientReducer");
  for (const NamedGradient& g : grads_) {
    APS_CHECK(g.grad.dtype == DType::Float32 && g.grad.device.isCpu(),
              "comm streaming reducer: gradient '{}' must be float32 on the cpu", g.name);
    APS_CHECK(g.grad.count == 0 || g.grad.data != nullptr, "comm streaming reducer: gradient '{}' has no data", g.name);
  }
  int64_t largest = 0;
  for (const BucketLayout::Bucket& b : layout_.buckets()) {
    APS_CHECK(
        b.format >= 0 && static_cast<size_t>(b.format) < algorithms.size() && algorithms[static_cast<size_t>(b.format)],
        "comm streaming reducer: format {} has no algorithm ({} given)", b.format, algorithms.size());
    streams_.push_back(algorithms[static_cast<size_t>(b.format)]->makeStreaming(worldSize));
    largest = std::max(largest, b.count);
  }
  flat_.resize(static_cast<size_t>(largest));
}

void StreamingGradientReducer::addRank() {
  APS_CHECK(added_ < world_, "comm streaming reducer: all {} ranks of this step were already added", world_);
  const auto start = std::chrono::steady_clock::now();
  for (size_t b = 0; b < streams_.size(); ++b) {
    const BucketLayout::Bucket& bucket = layout_.buckets()[b];
    if (added_ == 0) {
      // The same stream per step and bucket as GradientReducer::reduceBucket.
      streams_[b]->begin(bucket.count, {options_.seed, step_ * 1000003ull + b, 0});
    }
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const BufferView& g = grads_[static_cast<size_t>(bucket.params[k])].grad;
      if (g.count > 0) std::memcpy(flat_.data() + bucket.offsets[k], g.data, g.bytes());
    }
    streams_[b]->add(flat_.data());
  }
  ++added_;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

StepCommStats StreamingGradientReducer::finish() {
  APS_CHECK(added_ == world_, "comm streaming reducer: finish() after {} of {} ranks", added_, world_);
  const auto start = std::chrono::steady_clock::now();
  StepCommStats stats;
  stats.bytesSent.assign(static_cast<size_t>(world_), 0);
  stats.buckets = static_cast<int>(streams_.size());
  for (size_t b = 0; b < streams_.size(); ++b) {
    const BucketLayout::Bucket& bucket = layout_.buckets()[b];
    const SyncStats sync = streams_[b]->finish(flat_.data());
    if (options_.average) {
      const auto world = static_cast<float>(world_);
      for (int64_t i = 0; i < bucket.count; ++i) flat_[static_cast<size_t>(i)] /= world;
    }
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const BufferView& g = grads_[static_cast<size_t>(bucket.params[k])].grad;
      if (g.count > 0) std::memcpy(g.data, flat_.data() + bucket.offsets[k], g.bytes());
    }
    stats.nonFinite = stats.nonFinite || sync.nonFinite;
    for (size_t r = 0; r < sync.bytesSent.size(); ++r) stats.bytesSent[r] += sync.bytesSent[r];
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.commSeconds = seconds_;
  stats.exposedSeconds = seconds_;
  seconds_ = 0.0;
  added_ = 0;
  ++step_;
  return stats;
}

}  // namespace aps::comm
