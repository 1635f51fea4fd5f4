#include "data/SegmentationPairSource.h"

#include "data/FileBytes.h"
#include "framework/core/Error.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace aps::data {

namespace fs = std::filesystem;

SegmentationPairSource::SegmentationPairSource(std::vector<Pair> pairs, int64_t numClasses, LabelEncoding encoding,
                                               uint64_t maxPixels)
    : pairs_(std::move(pairs)), numClasses_(numClasses), encoding_(encoding), maxPixels_(maxPixels) {
  APS_CHECK(numClasses > 0 && numClasses < kIgnoreLabel, "segmentation: numClasses must be in [1, 255), got {}",
            numClasses);
}

void SegmentationPairSource::read(int64_t index, Example& out) const {
  APS_CHECK(index >= 0 && index < size(), "segmentation pair index {} out of range [0, {})", index, size());
  const Pair& p = pair(index);
  decodeImageFile(p.image, out.image, maxPixels_);
  decodeLabelFile(p.labels, encoding_, numClasses_, out.mask, maxPixels_);
  APS_CHECK(out.image.height == out.mask.height && out.image.width == out.mask.width,
            "segmentation pair size mismatch: {} is {}x{} but {} is {}x{}", p.image, out.image.width, out.image.height,
            p.labels, out.mask.width, out.mask.height);
  out.label = -1;
}

std::string SegmentationPairSource::describe(int64_t index) const {
  const Pair& p = pair(index);
  return p.image + " / " + p.labels;
}

std::shared_ptr<SegmentationPairSource> openCityscapes(const std::string& root, const std::string& split,
                                                       uint64_t maxPixels) {
  constexpr int64_t kCityscapesTrainClasses = 19;
  const std::string kImageSuffix = "_leftImg8bit.png";
  const fs::path imageRoot = fs::path(root) / "leftImg8bit" / split;
  const fs::path labelRoot = fs::path(root) / "gtFine" / split;
  requirePath(imageRoot.string(), "Cityscapes image folder");
  requirePath(labelRoot.string(), "Cityscapes label folder");
  std::vector<std::string> cities;
  for (const auto& entry : fs::directory_iterator(imageRoot)) {
    if (entry.is_directory()) cities.push_back(entry.path().filename().string());
  }
  std::sort(cities.begin(), cities.end());
  std::vector<SegmentationPairSource::Pair> pairs;
  for (const auto& city : cities) {
    std::vector<std::string> stems;
    for (const auto& entry : fs::directory_iterator(imageRoot / city)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > kImageSuffix.size() && name.ends_with(kImageSuffix)) {
        stems.push_back(name.substr(0, name.size() - kImageSuffix.size()));
      }
    }
    std::sort(stems.begin(), stems.end());
    for (const auto& stem : stems) {
      const std::string labels = (labelRoot / city / (stem + "_gtFine_labelTrainIds.png")).string();
      requirePath(labels, "Cityscapes label file",
                  "create *_labelTrainIds.png with cityscapesscripts' createTrainIdLabelImgs");
      pairs.push_back({(imageRoot / city / (stem + kImageSuffix)).string(), labels});
    }
  }
  APS_CHECK(!pairs.empty(), "no *_leftImg8bit.png images under {}", imageRoot.string());
  return std::make_shared<SegmentationPairSource>(std::move(pairs), kCityscapesTrainClasses, LabelEncoding::kIndex,
                                                  maxPixels);
}

std::shared_ptr<SegmentationPairSource> openPascalVoc(const std::string& root, const std::string& split,
                                                      uint64_t maxPixels) {
  constexpr int64_t kVocClasses = 21;  // background + 20 object classes
  const fs::path listPath = fs::path(root) / "ImageSets" / "Segmentation" / (split + ".txt");
  requirePath(listPath.string(), "Pascal VOC split list");
  std::ifstream list(listPath);
  APS_CHECK(list.good(), "cannot read {}", listPath.string());
  std::vector<SegmentationPairSource::Pair> pairs;
  std::string id;
  while (list >> id) {
    const std::string image = (fs::path(root) / "JPEGImages" / (id + ".jpg")).string();
    const std::string labels = (fs::path(root) / "SegmentationClass" / (id + ".png")).string();
    requirePath(image, "Pascal VOC image");
    requirePath(labels, "Pascal VOC label file");
    pairs.push_back({image, labels});
  }
  APS_CHECK(!pairs.empty(), "Pascal VOC split list {} names no images", listPath.string());
  return std::make_shared<SegmentationPairSource>(std::move(pairs), kVocClasses, LabelEncoding::kVocPalette, maxPixels);
}

}  // namespace aps::data
