#pragma once

#include "data/Batch.h"
#include "data/Dataset.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace aps::data {

struct LoaderOptions {
  int64_t batchSize = 32;
  int workers = 2;        // background threads; 0 loads on the consumer's thread
  int prefetch = 4;       // batches being loaded or waiting, at most (bounds memory)
  bool dropLast = false;  // drop a final batch smaller than batchSize
  uint64_t seed = 0;      // augmentation seed: sample i of epoch e uses sampleRng(seed, e, i)
};

// Where the consumer's time went. waitSeconds is the time next() spent blocked for data
// (with 0 workers: all the loading time), i.e. the training time lost to input.
struct LoaderStats {
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t stalls = 0;         // next() calls that found their batch not ready
  double waitSeconds = 0;     // total time next() blocked
  double maxWaitSeconds = 0;  // longest single wait
  double loadSeconds = 0;     // time spent assembling batches, summed over workers
};

// Assembles batches of a Dataset in background threads into a bounded queue. Batch b of an
// epoch holds indices[b * batchSize, ...) in order, and sample i's augmentation depends only
// on (seed, epoch, i), so the batches are bit-identical whatever the number of workers.
// A sample that fails to load (aps::Error naming its file) is rethrown by next() in the
// batch where it belongs; nothing is skipped.
class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts loading `epoch` over `indices` (e.g. DistributedSampler::indices(epoch)); any
  // epoch still in progress is abandoned.
  void startEpoch(uint64_t epoch, std::vector<int64_t> indices);
  // The next batch of the epoch into `batch` (its buffers are recycled); false at the end.
  bool next(Batch& batch);

  int64_t batchesInEpoch() const { return numBatches_; }
  const Dataset& dataset() const { return *dataset_; }
  LoaderStats stats() const;
  void resetStats();

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void workerLoop();
  void fill(int64_t batchIndex, Batch& batch) const;
  void stopWorkers();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  SampleShape shape_;

  std::vector<int64_t> indices_;
  uint64_t epoch_ = 0;
  int64_t numBatches_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable spaceCv_;  // workers wait for room in the queue
  std::condition_variable readyCv_;  // the consumer waits for its batch
  int64_t nextToClaim_ = 0;
  int64_t nextToDeliver_ = 0;
  bool stop_ = false;
  std::map<int64_t, Slot> ready_;
  std::vector<Batch> pool_;
  std::vector<std::thread> workers_;
  LoaderStats stats_;
};

}  // namespace aps::data
