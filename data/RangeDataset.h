#pragma once

#include "data/Dataset.h"
#include "framework/core/Error.h"

#include <memory>

namespace aps::data {

// Samples [first, first + count) of another dataset, renumbered from 0: the validation split
// that data.validation_samples holds out of a training set.
class RangeDataset final : public Dataset {
 public:
  RangeDataset(std::shared_ptr<const Dataset> base, int64_t first, int64_t count)
      : base_(std::move(base)), first_(first), count_(count) {
    APS_CHECK(first_ >= 0 && count_ >= 0 && first_ + count_ <= base_->size(),
              "samples [{}, {}) are outside a dataset of {}", first_, first_ + count_, base_->size());
  }

  int64_t size() const override { return count_; }
  int64_t numClasses() const override { return base_->numClasses(); }
  SampleShape sampleShape() const override { return base_->sampleShape(); }
  void get(int64_t index, Rng& rng, float* image, int64_t* label) const override {
    APS_CHECK(index >= 0 && index < count_, "sample {} of a range of {}", index, count_);
    base_->get(first_ + index, rng, image, label);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t first_, count_;
};

}  // namespace aps::data
