#pragma once

#include "data/ExampleSource.h"
#include "data/ImageDecode.h"

#include <memory>
#include <string>
#include <vector>

namespace aps::data {

// Image / label-map pairs on disk. Labels are class indices below numClasses or kIgnoreLabel
// (255); an image and its labels must have the same size.
class SegmentationPairSource final : public ExampleSource {
 public:
  struct Pair {
    std::string image;
    std::string labels;
  };
  // maxPixels: the largest image or label map accepted (decodeImageFile).
  SegmentationPairSource(std::vector<Pair> pairs, int64_t numClasses, LabelEncoding encoding,
                         uint64_t maxPixels = kMaxImagePixels);

  int64_t size() const override { return static_cast<int64_t>(pairs_.size()); }
  int64_t numClasses() const override { return numClasses_; }
  bool isSegmentation() const override { return true; }
  void read(int64_t index, Example& out) const override;
  std::string describe(int64_t index) const override;

  const Pair& pair(int64_t index) const { return pairs_[static_cast<size_t>(index)]; }

 private:
  std::vector<Pair> pairs_;
  int64_t numClasses_ = 0;
  LabelEncoding encoding_;
  uint64_t maxPixels_ = kMaxImagePixels;
};

// Cityscapes (Cordts et al., CVPR 2016) fine annotations with the 19 training classes:
// root/leftImg8bit/<split>/<city>/<stem>_leftImg8bit.png paired with
// root/gtFine/<split>/<city>/<stem>_gtFine_labelTrainIds.png (made by cityscapesscripts'
// createTrainIdLabelImgs). Cities and files are taken in sorted order.
std::shared_ptr<SegmentationPairSource> openCityscapes(const std::string& root, const std::string& split,
                                                       uint64_t maxPixels = kMaxImagePixels);

// Pascal VOC 2012 segmentation (21 classes, boundary pixels 255): the ids listed in
// root/ImageSets/Segmentation/<split>.txt, images root/JPEGImages/<id>.jpg, labels
// root/SegmentationClass/<id>.png (indexed colour).
std::shared_ptr<SegmentationPairSource> openPascalVoc(const std::string& root, const std::string& split,
                                                      uint64_t maxPixels = kMaxImagePixels);

}  // namespace aps::data
