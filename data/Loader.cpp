#include "data/Loader.h"

#include "data/SampleRng.h"
#include "framework/core/Error.h"

#include <algorithm>
#include <chrono>

namespace aps::data {

namespace {
using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  APS_CHECK(dataset_ != nullptr, "Loader: no dataset");
  APS_CHECK(options_.batchSize > 0, "Loader: batchSize must be positive, got {}", options_.batchSize);
  APS_CHECK(options_.workers >= 0, "Loader: workers must be >= 0, got {}", options_.workers);
  APS_CHECK(options_.prefetch > 0, "Loader: prefetch must be positive, got {}", options_.prefetch);
  shape_ = dataset_->sampleShape();
}

Loader::~Loader() { stopWorkers(); }

void Loader::stopWorkers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  spaceCv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void Loader::startEpoch(uint64_t epoch, std::vector<int64_t> indices) {
  stopWorkers();
  for (int64_t i : indices) {
    APS_CHECK(i >= 0 && i < dataset_->size(), "Loader: index {} out of range [0, {})", i, dataset_->size());
  }
  const auto n = static_cast<int64_t>(indices.size());
  indices_ = std::move(indices);
  epoch_ = epoch;
  numBatches_ = options_.dropLast ? n / options_.batchSize : (n + options_.batchSize - 1) / options_.batchSize;
  for (auto& [b, slot] : ready_) pool_.push_back(std::move(slot.batch));
  ready_.clear();
  nextToClaim_ = 0;
  nextToDeliver_ = 0;
  stop_ = false;
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { workerLoop(); });
}

void Loader::fill(int64_t batchIndex, Batch& batch) const {
  const int64_t begin = batchIndex * options_.batchSize;
  const int64_t n = std::min(options_.batchSize, static_cast<int64_t>(indices_.size()) - begin);
  const int64_t imageNumel = shape_.imageNumel(), labelNumel = shape_.labelNumel();
  batch.indices.assign(indices_.begin() + begin, indices_.begin() + begin + n);
  batch.imageShape = {n};
  batch.imageShape.insert(batch.imageShape.end(), shape_.image.begin(), shape_.image.end());
  batch.labelShape = {n};
  batch.labelShape.insert(batch.labelShape.end(), shape_.label.begin(), shape_.label.end());
  batch.images.resize(static_cast<size_t>(n * imageNumel));
  batch.labels.resize(static_cast<size_t>(n * labelNumel));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t index = batch.indices[static_cast<size_t>(j)];
    Rng rng = sampleRng(options_.seed, epoch_, static_cast<uint64_t>(index));
    dataset_->get(index, rng, batch.images.data() + j * imageNumel, batch.labels.data() + j * labelNumel);
  }
}

void Loader::workerLoop() {
  for (;;) {
    int64_t b = 0;
    Batch batch;
    {
      std::unique_lock lock(mutex_);
      spaceCv_.wait(lock, [&] {
        return stop_ || nextToClaim_ >= numBatches_ || nextToClaim_ < nextToDeliver_ + options_.prefetch;
      });
      if (stop_ || nextToClaim_ >= numBatches_) return;
      b = nextToClaim_++;
      if (!pool_.empty()) {
        batch = std::move(pool_.back());
        pool_.pop_back();
      }
    }
    const auto start = Clock::now();
    std::exception_ptr error;
    try {
      fill(b, batch);
    } catch (...) {
      error = std::current_exception();
    }
    const double seconds = secondsSince(start);
    {
      std::lock_guard lock(mutex_);
      stats_.loadSeconds += seconds;
      ready_[b] = Slot{std::move(batch), error};
    }
    readyCv_.notify_all();
  }
}

bool Loader::next(Batch& batch) {
  if (nextToDeliver_ >= numBatches_) return false;
  const auto start = Clock::now();
  if (options_.workers == 0) {
    const int64_t b = nextToDeliver_++;
    fill(b, batch);
    const double seconds = secondsSince(start);
    std::lock_guard lock(mutex_);
    stats_.loadSeconds += seconds;
    stats_.waitSeconds += seconds;
    stats_.maxWaitSeconds = std::max(stats_.maxWaitSeconds, seconds);
    ++stats_.stalls;
    ++stats_.batches;
    stats_.samples += batch.size();
    return true;
  }
  Slot slot;
  {
    std::unique_lock lock(mutex_);
    auto it = ready_.find(nextToDeliver_);
    if (it == ready_.end()) {
      ++stats_.stalls;
      readyCv_.wait(lock, [&] { return (it = ready_.find(nextToDeliver_)) != ready_.end(); });
    }
    const double waited = secondsSince(start);
    stats_.waitSeconds += waited;
    stats_.maxWaitSeconds = std::max(stats_.maxWaitSeconds, waited);
    slot = std::move(it->second);
    ready_.erase(it);
    ++nextToDeliver_;
    if (!slot.error) {
      std::swap(batch, slot.batch);
      pool_.push_back(std::move(slot.batch));  // the caller's previous buffers, for reuse
      ++stats_.batches;
      stats_.samples += batch.size();
    }
  }
  spaceCv_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return true;
}

LoaderStats Loader::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Loader::resetStats() {
  std::lock_guard lock(mutex_);
  stats_ = {};
}

}  // namespace aps::data
