#include "comm/StreamingAllReduce.h"

#include "comm/AllGatherAllReduce.h"
#include "comm/ExchangeSchedule.h"
#include "comm/Fp32WireCodec.h"
#include "comm/NonFinite.h"
#include "comm/TwoShotAllReduce.h"
#include "framework/core/Error.h"

namespace aps::comm {

namespace {

// Chunk c of n values over N ranks, exactly as ExchangeSchedule splits it.
int64_t chunkBegin(int64_t n, int world, int c) { return n * c / world; }
int64_t chunkSize(int64_t n, int world, int c) { return chunkBegin(n, world, c + 1) - chunkBegin(n, world, c); }

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StreamingAllReduce::StreamingAllReduce(const AllReduceOptions& options, std::shared_ptr<const precision::Codec> codec,
                                       int worldSize)
    : options_(options), codec_(std::move(codec)), world_(worldSize) {
  APS_CHECK(worldSize >= 1, "comm streaming: world size must be at least 1, got {}", worldSize);
  APS_CHECK(options.kind != AllReduceKind::Ring,
            "comm streaming: ring cannot be simulated one rank at a time; use SimTransport with all buffers");
  if (options.kind == AllReduceKind::Native) codec_ = std::make_shared<Fp32WireCodec>();
  APS_CHECK(codec_ != nullptr, "comm streaming {}: needs a codec", allReduceKindName(options.kind));
  APS_CHECK(options.kind != AllReduceKind::AllGather || !options.kahan || options.roundEveryAdd,
            "comm streaming allgather: Kahan summation applies only when rounding after every add");
}

void StreamingAllReduce::begin(int64_t n, const precision::EncodeContext& ctx) {
  APS_CHECK(n >= 0, "comm streaming: negative element count {}", n);
  const auto start = std::chrono::steady_clock::now();
  n_ = n;
  next_ = 0;
  ctx_ = ctx;
  nonFinite_ = false;
  seconds_ = 0.0;
  if (options_.kind == AllReduceKind::AllGather) {
    sum_ = std::make_unique<RankOrderSum>(*codec_, AllGatherAllReduce::sumMode(options_.roundEveryAdd, options_.kahan),
                                          ctx_, AllGatherAllReduce::kSumPhase);
    sum_->reset(n);
  } else {
    chunkSums_.clear();
    for (int c = 0; c < world_; ++c) {
      chunkSums_.emplace_back(*codec_, RankOrderSum::Mode::Fp32, ctx_, 0);
      chunkSums_.back().reset(chunkSize(n, world_, c));
    }
  }
  seconds_ += since(start);
}

void StreamingAllReduce::add(const float* data) {
  APS_CHECK(n_ >= 0, "comm streaming: add() before begin()");
  APS_CHECK(next_ < world_, "comm streaming: all {} ranks were already added", world_);
  const auto start = std::chrono::steady_clock::now();
  const int rank = next_++;
  if (options_.checkFinite && hasNonFinite(data, n_)) nonFinite_ = true;
  if (options_.kind == AllReduceKind::AllGather) {
    encoded_.resize(encodedSize(*codec_, n_));
    if (n_ > 0) {
      codec_->encode(data, n_, encoded_.data(),
                     scheduleEncodeContext(ctx_, rank, AllGatherAllReduce::kEncodeInputPhase, 0));
    }
    sum_->add(encoded_.data());
  } else {
    addTwoShot(rank, data);
  }
  seconds_ += since(start);
}

void StreamingAllReduce::addTwoShot(int rank, const float* data) {
  // Rank `rank` encodes chunk c for its owner c, which adds it to its rank-order sum.
  for (int c = 0; c < world_; ++c) {
    const int64_t len = chunkSize(n_, world_, c);
    encoded_.resize(encodedSize(*codec_, len));
    if (len > 0) {
      const int64_t begin = chunkBegin(n_, world_, c);
      codec_->encode(data + begin, len, encoded_.data(),
                     scheduleEncodeContext(ctx_, rank, TwoShotAllReduce::kEncodeInputPhase, begin));
    }
    chunkSums_[static_cast<size_t>(c)].add(encoded_.data());
  }
}

SyncStats StreamingAllReduce::finish(float* out) {
  APS_CHECK(n_ >= 0 && next_ == world_, "comm streaming: finish() after {} of {} ranks", next_, world_);
  const auto start = std::chrono::steady_clock::now();
  SyncStats stats;
  const uint64_t flag = options_.checkFinite ? static_cast<uint64_t>(world_ - 1) : 0;
  stats.bytesSent.assign(static_cast<size_t>(world_), flag);
  if (options_.kind == AllReduceKind::AllGather) {
    sum_->result(out);
    const uint64_t bytes = encodedSize(*codec_, n_);
    for (auto& b : stats.bytesSent) b += static_cast<uint64_t>(world_ - 1) * bytes;
  } else {
    // Owner c encodes its chunk's sum once; every rank decodes the all-gathered bytes.
    std::vector<uint64_t> counts(static_cast<size_t>(world_));
    uint64_t total = 0;
    for (int c = 0; c < world_; ++c) {
      const int64_t len = chunkSize(n_, world_, c);
      counts[static_cast<size_t>(c)] = encodedSize(*codec_, len);
      total += counts[static_cast<size_t>(c)];
      if (len == 0) continue;
      const int64_t begin = chunkBegin(n_, world_, c);
      encoded_.resize(counts[static_cast<size_t>(c)]);
      codec_->encode(chunkSums_[static_cast<size_t>(c)].fp32Sum(), len, encoded_.data(),
                     scheduleEncodeContext(ctx_, c, TwoShotAllReduce::kEncodeSumPhase, begin));
      codec_->decode(encoded_.data(), len, out + begin);
    }
    for (int r = 0; r < world_; ++r) {
      const uint64_t own = counts[static_cast<size_t>(r)];
      stats.bytesSent[static_cast<size_t>(r)] += (total - own) + static_cast<uint64_t>(world_ - 1) * own;
    }
  }
  stats.nonFinite = options_.checkFinite && (nonFinite_ || hasNonFinite(out, n_));
  seconds_ += since(start);
  stats.seconds = seconds_;
  n_ = -1;
  return stats;
}

}  // namespace aps::comm
