#include "data/TransformedDataset.h"

#include "framework/core/Error.h"

namespace aps::data {

int64_t SampleShape::imageNumel() const {
  int64_t n = 1;
  for (int64_t d : image) n *= d;
  return n;
}

int64_t SampleShape::labelNumel() const {
  int64_t n = 1;
  for (int64_t d : label) n *= d;
  return n;
}

TransformedDataset::TransformedDataset(std::shared_ptr<const ExampleSource> source,
                                       std::vector<std::shared_ptr<const Transform>> transforms, Normalize normalize)
    : source_(std::move(source)), transforms_(std::move(transforms)), normalize_(std::move(normalize)) {
  APS_CHECK(source_ != nullptr, "TransformedDataset: no source");
  APS_CHECK(source_->size() > 0, "dataset is empty");
  for (const auto& t : transforms_) APS_CHECK(t != nullptr, "TransformedDataset: null transform");
  Example first;
  Rng rng(0);
  transformed(0, rng, first);
  APS_CHECK(normalize_.channels() == 0 || normalize_.channels() == first.image.channels,
            "Normalize has {} channels but {} has {}", normalize_.channels(), source_->describe(0),
            first.image.channels);
  shape_.image = {first.image.channels, first.image.height, first.image.width};
  if (source_->isSegmentation()) shape_.label = {first.mask.height, first.mask.width};
}

void TransformedDataset::transformed(int64_t index, Rng& rng, Example& out) const {
  APS_CHECK(index >= 0 && index < size(), "dataset index {} out of range [0, {})", index, size());
  source_->read(index, out);
  for (const auto& t : transforms_) t->apply(out, rng);
}

void TransformedDataset::get(int64_t index, Rng& rng, float* image, int64_t* label) const {
  thread_local Example example;
  transformed(index, rng, example);
  const Image& im = example.image;
  APS_CHECK(im.channels == shape_.image[0] && im.height == shape_.image[1] && im.width == shape_.image[2],
            "{}: sample is {}x{}x{} (CxHxW) after transforms, but the dataset's samples are {}x{}x{}; add a crop or "
            "resize so that all samples have one size",
            source_->describe(index), im.channels, im.height, im.width, shape_.image[0], shape_.image[1],
            shape_.image[2]);
  normalize_.apply(im, image);
  if (shape_.label.empty()) {
    label[0] = example.label;
    return;
  }
  const LabelMap& mask = example.mask;
  APS_CHECK(mask.height == shape_.label[0] && mask.width == shape_.label[1],
            "{}: label map is {}x{} after transforms, expected {}x{}", source_->describe(index), mask.height,
            mask.width, shape_.label[0], shape_.label[1]);
  for (size_t p = 0; p < mask.labels.size(); ++p) label[p] = mask.labels[p];
}

}  // namespace aps::data
