#pragma once

#include "data/Dataset.h"
#include "data/ExampleSource.h"
#include "data/Normalize.h"
#include "data/Transform.h"

#include <memory>
#include <vector>

namespace aps::data {

// An example source seen through a transform pipeline and a final normalisation: the
// Dataset every recipe builds. The sample shape is that of example 0 after the pipeline;
// a sample of another shape (images of different sizes without a crop or resize) is an
// aps::Error naming its file.
class TransformedDataset final : public Dataset {
 public:
  TransformedDataset(std::shared_ptr<const ExampleSource> source,
                     std::vector<std::shared_ptr<const Transform>> transforms, Normalize normalize = {});

  int64_t size() const override { return source_->size(); }
  int64_t numClasses() const override { return source_->numClasses(); }
  SampleShape sampleShape() const override { return shape_; }
  void get(int64_t index, Rng& rng, float* image, int64_t* label) const override;

  const ExampleSource& source() const { return *source_; }
  // The example after the transforms, before normalisation (for inspection and tests).
  void transformed(int64_t index, Rng& rng, Example& out) const;

 private:
  std::shared_ptr<const ExampleSource> source_;
  std::vector<std::shared_ptr<const Transform>> transforms_;
  Normalize normalize_;
  SampleShape shape_;
};

}  // namespace aps::data
