#include "data/IdxSource.h"

#include "data/FileBytes.h"
#include "framework/core/Error.h"

#include <fmt/ranges.h>

#include <cstring>

namespace aps::data {

namespace {

uint32_t bigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Parses an idx file of unsigned bytes with `rank` dimensions; returns the dimensions and
// leaves only the payload in `bytes`.
std::vector<int64_t> parseIdx(const std::string& path, int rank, std::vector<uint8_t>& bytes) {
  const uint32_t expectedMagic = 0x00000800u | static_cast<uint32_t>(rank);
  APS_CHECK(bytes.size() >= 4, "{}: truncated idx file ({} bytes, no header)", path, bytes.size());
  const uint32_t magic = bigEndian32(bytes.data());
  APS_CHECK(magic == expectedMagic, "{}: wrong magic number 0x{:08x}, expected 0x{:08x} (idx, unsigned bytes, {}-D)",
            path, magic, expectedMagic, rank);
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  APS_CHECK(bytes.size() >= header, "{}: truncated idx header ({} bytes, need {})", path, bytes.size(), header);
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  size_t payload = 1;
  bool overflow = false;
  for (int d = 0; d < rank; ++d) {
    dims[static_cast<size_t>(d)] = bigEndian32(bytes.data() + 4 + 4 * d);
    // Three 32-bit sizes can multiply past 64 bits; a wrapped product could match the file.
    overflow = __builtin_mul_overflow(payload, static_cast<size_t>(dims[static_cast<size_t>(d)]), &payload) || overflow;
  }
  APS_CHECK(!overflow, "{}: idx header sizes {} overflow 64 bits", path, fmt::join(dims, "x"));
  APS_CHECK(bytes.size() - header >= payload, "{}: truncated idx file: header promises {} data bytes, file has {}",
            path, payload, bytes.size() - header);
  APS_CHECK(bytes.size() - header == payload, "{}: {} unexpected bytes after the idx data", path,
            bytes.size() - header - payload);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  return dims;
}

}  // namespace

IdxSource::IdxSource(const std::string& imagesPath, const std::string& labelsPath, int64_t numClasses)
    : imagesPath_(imagesPath), numClasses_(numClasses) {
  APS_CHECK(numClasses > 0 && numClasses <= 256, "IdxSource: numClasses must be in [1, 256], got {}", numClasses);
  images_ = readFileBytes(imagesPath);
  const auto imageDims = parseIdx(imagesPath, 3, images_);
  labels_ = readFileBytes(labelsPath);
  const auto labelDims = parseIdx(labelsPath, 1, labels_);
  APS_CHECK(imageDims[0] == labelDims[0], "idx image/label count mismatch: {} has {} images, {} has {} labels",
            imagesPath, imageDims[0], labelsPath, labelDims[0]);
  APS_CHECK(imageDims[1] > 0 && imageDims[2] > 0, "{}: empty image size {}x{}", imagesPath, imageDims[1], imageDims[2]);
  constexpr int64_t kMaxSide = 1 << 15;  // height_ and width_ are ints; H*W must fit one
  APS_CHECK(imageDims[1] <= kMaxSide && imageDims[2] <= kMaxSide, "{}: image size {}x{} exceeds {}x{}", imagesPath,
            imageDims[1], imageDims[2], kMaxSide, kMaxSide);
  count_ = imageDims[0];
  height_ = static_cast<int>(imageDims[1]);
  width_ = static_cast<int>(imageDims[2]);
  for (size_t i = 0; i < labels_.size(); ++i) {
    APS_CHECK(labels_[i] < numClasses, "{}: label {} of item {} is out of range [0, {})", labelsPath, labels_[i], i,
              numClasses);
  }
}

void IdxSource::read(int64_t index, Example& out) const {
  APS_CHECK(index >= 0 && index < count_, "{}: index {} out of range [0, {})", imagesPath_, index, count_);
  out.image.reshape(height_, width_, 1);
  std::memcpy(out.image.pixels.data(), imageBytes(index), static_cast<size_t>(height_) * width_);
  out.mask.reshape(0, 0);
  out.label = labelOf(index);
}

std::string IdxSource::describe(int64_t index) const { return imagesPath_ + " item " + std::to_string(index); }

}  // namespace aps::data
