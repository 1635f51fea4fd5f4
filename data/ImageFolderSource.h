#pragma once

#include "data/ExampleSource.h"
#include "data/ImageDecode.h"

#include <string>
#include <vector>

namespace aps::data {

// Images in the ImageNet folder layout, as torchvision's ImageFolder reads it:
// root/<class_name>/<file>.{JPEG,jpg,jpeg,png} (extension case ignored), classes numbered in
// the sorted order of their folder names, files sorted by name within a class. Pass
// imagenet/train or imagenet/val (val sorted into class folders) as root. Decoding happens in
// read(), so the loader's worker threads share it.
class ImageFolderSource final : public ExampleSource {
 public:
  // maxPixels: the largest image accepted (decodeImageFile).
  explicit ImageFolderSource(const std::string& root, uint64_t maxPixels = kMaxImagePixels);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t numClasses() const override { return static_cast<int64_t>(classNames_.size()); }
  bool isSegmentation() const override { return false; }
  void read(int64_t index, Example& out) const override;
  std::string describe(int64_t index) const override { return path(index); }

  const std::vector<std::string>& classNames() const { return classNames_; }
  std::string path(int64_t index) const;
  int64_t labelOf(int64_t index) const { return files_[static_cast<size_t>(index)].label; }

 private:
  struct Entry {
    std::string name;  // file name inside its class folder
    int64_t label = 0;
  };
  std::string root_;
  uint64_t maxPixels_ = kMaxImagePixels;
  std::vector<std::string> classNames_;
  std::vector<Entry> files_;
};

}  // namespace aps::data
