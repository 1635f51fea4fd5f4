#include "data/CifarSource.h"

#include "data/FileBytes.h"
#include "framework/core/Error.h"

#include <filesystem>

namespace aps::data {

CifarSource::CifarSource(const std::string& dir, const std::string& split, Variant variant) {
  const bool train = split == "train";
  APS_CHECK(train || split == "test" || split == "val", "unknown CIFAR split '{}' (expected train, test or val)",
            split);
  const bool cifar10 = variant == Variant::kCifar10;
  std::vector<std::string> names;
  if (cifar10) {
    if (train) {
      for (int b = 1; b <= 5; ++b) names.push_back("data_batch_" + std::to_string(b) + ".bin");
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(train ? "train.bin" : "test.bin");
  }
  numClasses_ = variant == Variant::kCifar10 ? 10 : variant == Variant::kCifar100Fine ? 100 : 20;
  const int labelBytes = cifar10 ? 1 : 2;
  // CIFAR-100 stores the coarse label first, then the fine one.
  const int labelOffset = variant == Variant::kCifar100Fine ? 1 : 0;
  const size_t record = static_cast<size_t>(labelBytes + kPixels);

  requirePath(dir, cifar10 ? "CIFAR-10 folder" : "CIFAR-100 folder");
  for (const auto& name : names) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    requirePath(path, cifar10 ? "CIFAR-10 file" : "CIFAR-100 file");
    const std::vector<uint8_t> bytes = readFileBytes(path);
    APS_CHECK(!bytes.empty() && bytes.size() % record == 0,
              "{}: truncated CIFAR file: {} bytes is not a whole number of {}-byte records", path, bytes.size(),
              record);
    const int64_t n = static_cast<int64_t>(bytes.size() / record);
    files_.push_back({path, count_});
    pixels_.reserve(pixels_.size() + static_cast<size_t>(n) * kPixels);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* rec = bytes.data() + static_cast<size_t>(i) * record;
      const uint8_t label = rec[labelOffset];
      APS_CHECK(label < numClasses_, "{}: label {} of record {} is out of range [0, {})", path, label, i, numClasses_);
      labels_.push_back(label);
      pixels_.insert(pixels_.end(), rec + labelBytes, rec + record);
    }
    count_ += n;
  }
}

void CifarSource::read(int64_t index, Example& out) const {
  APS_CHECK(index >= 0 && index < count_, "CIFAR index {} out of range [0, {})", index, count_);
  out.image.reshape(kSide, kSide, 3);
  const uint8_t* planes = pixels_.data() + static_cast<size_t>(index) * kPixels;
  uint8_t* hwc = out.image.pixels.data();
  constexpr int kPlane = kSide * kSide;
  for (int p = 0; p < kPlane; ++p) {
    hwc[3 * p + 0] = planes[p];
    hwc[3 * p + 1] = planes[kPlane + p];
    hwc[3 * p + 2] = planes[2 * kPlane + p];
  }
  out.mask.reshape(0, 0);
  out.label = labels_[static_cast<size_t>(index)];
}

std::string CifarSource::describe(int64_t index) const {
  for (size_t f = files_.size(); f-- > 0;) {
    if (index >= files_[f].first) return files_[f].path + " record " + std::to_string(index - files_[f].first);
  }
  return "CIFAR record " + std::to_string(index);
}

}  // namespace aps::data
