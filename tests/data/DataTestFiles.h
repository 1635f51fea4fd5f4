#pragma once

// Writers for small files in each format the data library reads, into a temporary folder.

#include "tests/common/ErrorMessage.h"
#include "framework/core/Error.h"

#include <zlib.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace aps::data::testing {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("aps_data_test_" + std::to_string(std::random_device{}()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::vector<uint8_t> gzipBytes(const std::vector<uint8_t>& bytes) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip wrapper, as the MNIST .gz files have.
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflate");
  std::vector<uint8_t> out(deflateBound(&zs, bytes.size()) + 64);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline void putBigEndian32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// An idx image file (magic 0x00000803) holding `images` (count x h x w bytes).
inline std::vector<uint8_t> idxImages(const std::vector<uint8_t>& pixels, uint32_t count, uint32_t h, uint32_t w) {
  std::vector<uint8_t> out;
  putBigEndian32(out, 0x00000803u);
  putBigEndian32(out, count);
  putBigEndian32(out, h);
  putBigEndian32(out, w);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

inline std::vector<uint8_t> idxLabels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  putBigEndian32(out, 0x00000801u);
  putBigEndian32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

// The pixel value of item i at (y, x) in the generated idx sets: distinct per item and position.
inline uint8_t idxPixel(int i, int y, int x) { return static_cast<uint8_t>((i * 37 + y * 11 + x * 3) % 256); }

// Writes an MNIST-layout set ({prefix}-images-idx3-ubyte, {prefix}-labels-idx1-ubyte) of
// `count` h x w items with label i % 10, gzipped or not.
inline void writeMnistLayout(const std::string& dir, const std::string& prefix, int count, int h, int w, bool gz) {
  std::vector<uint8_t> pixels, labels;
  for (int i = 0; i < count; ++i) {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) pixels.push_back(idxPixel(i, y, x));
    labels.push_back(static_cast<uint8_t>(i % 10));
  }
  auto images = idxImages(pixels, static_cast<uint32_t>(count), static_cast<uint32_t>(h), static_cast<uint32_t>(w));
  auto lab = idxLabels(labels);
  const std::string suffix = gz ? ".gz" : "";
  writeBytes(dir + "/" + prefix + "-images-idx3-ubyte" + suffix, gz ? gzipBytes(images) : images);
  writeBytes(dir + "/" + prefix + "-labels-idx1-ubyte" + suffix, gz ? gzipBytes(lab) : lab);
}

// CIFAR pixel (channel c, y, x) of record i.
inline uint8_t cifarPixel(int i, int c, int y, int x) {
  return static_cast<uint8_t>((i * 7 + c * 50 + y * 3 + x) % 256);
}

// A CIFAR binary file: records of `labelBytes` label bytes then 3072 planar pixel bytes.
inline std::vector<uint8_t> cifarRecords(int first, int count, const std::vector<std::vector<uint8_t>>& labels) {
  std::vector<uint8_t> out;
  for (int r = 0; r < count; ++r) {
    const int i = first + r;
    for (uint8_t l : labels[static_cast<size_t>(r)]) out.push_back(l);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(cifarPixel(i, c, y, x));
  }
  return out;
}

// A solid-colour RGB image with one marker pixel at (0, 0), written with cv::imwrite (which
// takes BGR).
inline void writeRgbImage(const std::string& path, int h, int w, cv::Vec3b rgb, cv::Vec3b markerRgb) {
  fs::create_directories(fs::path(path).parent_path());
  cv::Mat bgr(h, w, CV_8UC3, cv::Scalar(rgb[2], rgb[1], rgb[0]));
  bgr.at<cv::Vec3b>(0, 0) = cv::Vec3b(markerRgb[2], markerRgb[1], markerRgb[0]);
  std::vector<int> params;
  if (path.ends_with(".jpg") || path.ends_with(".JPEG")) params = {cv::IMWRITE_JPEG_QUALITY, 100};
  if (!cv::imwrite(path, bgr, params)) throw std::runtime_error("cannot write " + path);
}

inline void writeGreyPng(const std::string& path, const cv::Mat& grey) {
  fs::create_directories(fs::path(path).parent_path());
  if (!cv::imwrite(path, grey)) throw std::runtime_error("cannot write " + path);
}

// An indexed-colour (palette) PNG, as Pascal VOC's SegmentationClass files are; OpenCV cannot
// write these, so the chunks are assembled here (PNG spec, ISO/IEC 15948: IHDR colour type 3,
// PLTE, one IDAT of filter-0 rows, IEND).
inline void writePalettePng(const std::string& path, const cv::Mat& indices, const std::vector<cv::Vec3b>& paletteRgb) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    putBigEndian32(png, static_cast<uint32_t>(data.size()));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    png.insert(png.end(), body.begin(), body.end());
    putBigEndian32(png, static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
  };
  std::vector<uint8_t> ihdr;
  putBigEndian32(ihdr, static_cast<uint32_t>(indices.cols));
  putBigEndian32(ihdr, static_cast<uint32_t>(indices.rows));
  ihdr.insert(ihdr.end(), {8, 3, 0, 0, 0});  // 8-bit, palette, deflate, filter 0, no interlace
  chunk("IHDR", ihdr);
  std::vector<uint8_t> plte;
  for (const auto& c : paletteRgb) plte.insert(plte.end(), {c[0], c[1], c[2]});
  chunk("PLTE", plte);
  std::vector<uint8_t> raw;
  for (int y = 0; y < indices.rows; ++y) {
    raw.push_back(0);
    for (int x = 0; x < indices.cols; ++x) raw.push_back(indices.at<uint8_t>(y, x));
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> idat(size);
  if (compress(idat.data(), &size, raw.data(), static_cast<uLong>(raw.size())) != Z_OK)
    throw std::runtime_error("zlib");
  idat.resize(size);
  chunk("IDAT", idat);
  chunk("IEND", {});
  writeBytes(path, png);
}

using aps::testsupport::errorOf;

}  // namespace aps::data::testing
