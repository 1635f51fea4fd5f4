#include "data/ImageFolderSource.h"

#include "data/FileBytes.h"
#include "data/ImageDecode.h"
#include "framework/core/Error.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace aps::data {

namespace fs = std::filesystem;

namespace {

bool isImageFile(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpeg" || ext == ".jpg" || ext == ".png";
}

}  // namespace

ImageFolderSource::ImageFolderSource(const std::string& root, uint64_t maxPixels) : root_(root), maxPixels_(maxPixels) {
  requirePath(root, "image folder");
  APS_CHECK(fs::is_directory(root), "image folder {} is not a directory", root);
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classNames_.push_back(entry.path().filename().string());
  }
  APS_CHECK(!classNames_.empty(), "image folder {} has no class folders (expected root/<class>/<image>)", root);
  std::sort(classNames_.begin(), classNames_.end());
  for (size_t c = 0; c < classNames_.size(); ++c) {
    const fs::path dir = fs::path(root) / classNames_[c];
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_directory() && isImageFile(entry.path())) names.push_back(entry.path().filename().string());
    }
    APS_CHECK(!names.empty(), "class folder {} has no .JPEG/.jpg/.png images", dir.string());
    std::sort(names.begin(), names.end());
    for (auto& name : names) files_.push_back({std::move(name), static_cast<int64_t>(c)});
  }
}

std::string ImageFolderSource::path(int64_t index) const {
  APS_CHECK(index >= 0 && index < size(), "image folder {}: index {} out of range [0, {})", root_, index, size());
  const Entry& e = files_[static_cast<size_t>(index)];
  return (fs::path(root_) / classNames_[static_cast<size_t>(e.label)] / e.name).string();
}

void ImageFolderSource::read(int64_t index, Example& out) const {
  decodeImageFile(path(index), out.image, maxPixels_);
  out.mask.reshape(0, 0);
  out.label = labelOf(index);
}

}  // namespace aps::data
