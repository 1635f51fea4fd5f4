#include "data/ImageDecode.h"

#include "data/FileBytes.h"
#include "framework/core/Error.h"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace aps::data {

namespace {

// VOC's 256 colours keyed by 0xRRGGBB, sorted for binary search.
struct VocColourTable {
  std::array<std::pair<uint32_t, uint8_t>, 256> entries;
  VocColourTable() {
    for (int i = 0; i < 256; ++i) {
      uint8_t rgb[3];
      vocPaletteColour(i, rgb);
      entries[static_cast<size_t>(i)] = {(uint32_t{rgb[0]} << 16) | (uint32_t{rgb[1]} << 8) | rgb[2],
                                         static_cast<uint8_t>(i)};
    }
    std::sort(entries.begin(), entries.end());
  }
  bool find(uint32_t key, uint8_t& index) const {
    const auto it = std::lower_bound(entries.begin(), entries.end(), std::pair<uint32_t, uint8_t>{key, 0});
    if (it == entries.end() || it->first != key) return false;
    index = it->second;
    return true;
  }
};

uint32_t bigEndian(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

// What an image's header declares.
struct Header {
  uint64_t width = 0, height = 0;
  uint64_t pngBitsPerPixel = 0;  // PNG: bit depth x channels (0 for a colour type PNG does not define)
};

// Width and height from a PNG's IHDR chunk (ISO/IEC 15948, 11.2.2) or a JPEG's first SOFn
// frame header (ITU-T T.81, B.2.2); false when the header does not say. Bytes between JPEG
// segments that are not a marker are skipped, as libjpeg skips them (with a warning), so that
// such bytes cannot hide the frame header from this check but not from the decoder.
bool readHeader(const std::vector<uint8_t>& bytes, bool png, Header& h) {
  const size_t n = bytes.size();
  if (png) {
    if (n < 26) return false;
    h.width = bigEndian(&bytes[16], 4);
    h.height = bigEndian(&bytes[20], 4);
    // Samples per pixel by colour type (ISO/IEC 15948, 6.1): grey, -, RGB, palette, grey + alpha, -, RGBA.
    static constexpr uint64_t kChannels[7] = {1, 0, 3, 1, 2, 0, 4};
    const uint8_t depth = bytes[24], colourType = bytes[25];
    h.pngBitsPerPixel = colourType < 7 ? depth * kChannels[colourType] : 0;
    return true;
  }
  for (size_t at = 2; at + 4 <= n;) {
    if (bytes[at] != 0xFF) {
      ++at;
      continue;
    }
    const uint8_t marker = bytes[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    const size_t length = bigEndian(&bytes[at + 2], 2);
    const bool frame = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame) {
      if (at + 9 > n) return false;
      h.height = bigEndian(&bytes[at + 5], 2);
      h.width = bigEndian(&bytes[at + 7], 2);
      return true;
    }
    if (length < 2) return false;
    at += 2 + length;
  }
  return false;
}

// The most pixels a file of n bytes can hold, from the entropy coders' own limits, so that a
// header cannot make the decoder do work out of all proportion to its input (libjpeg fills a
// short scan with zeros and decodes every declared block: 291 bytes declaring 10859 x 4589
// progressive pixels took 20 s under the sanitizers).
//  - JPEG: every 8x8 block of a full-resolution component has a DC coefficient, coded with a
//    Huffman code of at least one bit (ITU-T T.81, F.1.2.1; progressive DC scans too, G.1.2.1),
//    so n bytes hold at most 8n blocks: 512 pixels a byte. A blank 4:2:0 baseline JPEG needs
//    about 3 bits a block (170 pixels a byte) and photographs 1 to 3 bits a pixel, so no real
//    file comes near. Arithmetic coding (SOF9 and up, rare in datasets) could compress a blank
//    image further; such a file past the bound is refused like any other.
//  - PNG: the image data is a zlib stream whose deflate codes emit at most 258 bytes for two
//    bits (RFC 1951: the longest match, the shortest length and distance codes), 1032 bytes a
//    byte, so the scanlines (one filter byte plus the packed samples a row) hold at most 1032n
//    bytes; a 1-bit PNG is then bounded by about 8000 pixels a byte, an 8-bit label map by 1000.
// Called after the pixel limit, which keeps the products below 2^40.
bool inProportion(const Header& h, bool png, uint64_t n) {
  if (!png) return h.width * h.height <= 512 * n;
  if (h.pngBitsPerPixel == 0) return true;  // libpng refuses the colour type itself
  const uint64_t rowBytes = 1 + (h.width * h.pngBitsPerPixel + 7) / 8;
  return h.height * rowBytes <= 1032 * n;
}

// The bytes of an image file, checked to be complete: OpenCV's JPEG decoder returns a partly
// grey image for a truncated file (libjpeg only warns), so a JPEG must contain its EOI marker
// (FF D9, which cannot occur inside entropy-coded data: ITU-T T.81, B.1.1.5) and a PNG its IEND
// chunk (ISO/IEC 15948, 5.6) near the end.
cv::Mat decodeCompleteFile(const std::string& path, int flags, const char* what, uint64_t maxPixels) {
  requirePath(path, what);
  const std::vector<uint8_t> bytes = readFileBytes(path);
  const size_t n = bytes.size();
  const size_t tailStart = n > 4096 ? n - 4096 : 0;
  auto tailHas = [&](std::initializer_list<uint8_t> marker) {
    const auto tail = bytes.begin() + static_cast<std::ptrdiff_t>(tailStart);
    return std::search(tail, bytes.end(), marker.begin(), marker.end()) != bytes.end();
  };
  // The signatures OpenCV's own decoders require: JPEG SOI + a marker, PNG's 8 bytes.
  static constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  const bool jpeg = n >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
  const bool png = n >= 8 && std::equal(kPngSignature, kPngSignature + 8, bytes.begin());
  // Only the formats aps reads (image folders, Cityscapes and VOC hold JPEG and PNG): OpenCV
  // would otherwise try every decoder it has (DICOM, JPEG 2000, ...) on arbitrary bytes.
  APS_CHECK(jpeg || png, "cannot decode {} {}: not a JPEG or PNG file", what, path);
  if (jpeg) {
    APS_CHECK(tailHas({0xFF, 0xD9}), "{}: truncated JPEG file (no end-of-image marker)", path);
  } else {
    APS_CHECK(tailHas({'I', 'E', 'N', 'D'}), "{}: truncated PNG file (no IEND chunk)", path);
  }
  Header h;
  // A JPEG without a frame header cannot be decoded either; refusing it here keeps the size
  // checks from being bypassed. Both checks come before OpenCV allocates or decodes anything.
  APS_CHECK(readHeader(bytes, png, h), "cannot decode {} {}: no {} header", what, path, png ? "IHDR" : "frame (SOFn)");
  APS_CHECK(h.width * h.height <= std::min(maxPixels, kMaxImagePixels), "{}: image size {}x{} exceeds the {}-pixel limit",
            path, h.width, h.height, std::min(maxPixels, kMaxImagePixels));
  APS_CHECK(inProportion(h, png, n),
            "{}: image size {}x{} is out of proportion to the file's {} bytes (more pixels than {} coding can "
            "hold; the file is corrupt or crafted)",
            path, h.width, h.height, n, png ? "PNG's deflate" : "JPEG's Huffman");
  const cv::Mat raw(1, static_cast<int>(n), CV_8UC1, const_cast<uint8_t*>(bytes.data()));
  cv::Mat decoded;
  try {
    if (n > 0) decoded = cv::imdecode(raw, flags);
  } catch (const cv::Exception& e) {
    APS_FAIL("cannot decode {} {}: {}", what, path, e.what());
  }
  APS_CHECK(!decoded.empty(), "cannot decode {} {}", what, path);
  return decoded;
}

}  // namespace

void vocPaletteColour(int index, uint8_t rgb[3]) {
  int r = 0, g = 0, b = 0, c = index;
  for (int j = 0; j < 8; ++j) {
    r |= ((c >> 0) & 1) << (7 - j);
    g |= ((c >> 1) & 1) << (7 - j);
    b |= ((c >> 2) & 1) << (7 - j);
    c >>= 3;
  }
  rgb[0] = static_cast<uint8_t>(r);
  rgb[1] = static_cast<uint8_t>(g);
  rgb[2] = static_cast<uint8_t>(b);
}

void decodeImageFile(const std::string& path, Image& out, uint64_t maxPixels) {
  const cv::Mat bgr = decodeCompleteFile(path, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION, "image", maxPixels);
  APS_CHECK(bgr.type() == CV_8UC3, "{}: unexpected decoded type {}", path, bgr.type());
  out.reshape(bgr.rows, bgr.cols, 3);
  cv::Mat rgb(bgr.rows, bgr.cols, CV_8UC3, out.pixels.data());
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
}

void decodeLabelFile(const std::string& path, LabelEncoding encoding, int64_t numClasses, LabelMap& out,
                     uint64_t maxPixels) {
  const cv::Mat raw = decodeCompleteFile(path, cv::IMREAD_UNCHANGED, "label image", maxPixels);
  APS_CHECK(raw.depth() == CV_8U, "{}: label images must have 8-bit channels", path);
  out.reshape(raw.rows, raw.cols);
  uint8_t* labels = out.labels.data();
  if (raw.channels() == 1) {
    for (int y = 0; y < raw.rows; ++y) std::memcpy(labels + static_cast<size_t>(y) * raw.cols, raw.ptr(y), raw.cols);
  } else {
    APS_CHECK(encoding == LabelEncoding::kVocPalette && (raw.channels() == 3 || raw.channels() == 4),
              "{}: label image has {} channels; expected one 8-bit channel of class indices", path, raw.channels());
    static const VocColourTable table;
    const int step = raw.channels();
    for (int y = 0; y < raw.rows; ++y) {
      const uint8_t* row = raw.ptr(y);
      for (int x = 0; x < raw.cols; ++x) {
        const uint8_t* bgr = row + static_cast<size_t>(x) * step;
        const uint32_t key = (uint32_t{bgr[2]} << 16) | (uint32_t{bgr[1]} << 8) | bgr[0];
        uint8_t index = 0;
        APS_CHECK(table.find(key, index), "{}: pixel ({}, {}) has colour ({}, {}, {}) outside the VOC palette", path, x,
                  y, bgr[2], bgr[1], bgr[0]);
        labels[static_cast<size_t>(y) * raw.cols + x] = index;
      }
    }
  }
  const size_t count = out.labels.size();
  for (size_t i = 0; i < count; ++i) {
    const uint8_t v = labels[i];
    if (v >= numClasses && v != kIgnoreLabel) {
      APS_FAIL("{}: label {} at pixel ({}, {}) is out of range [0, {}) and is not the ignore index {}", path, v,
               i % static_cast<size_t>(out.width), i / static_cast<size_t>(out.width), numClasses, kIgnoreLabel);
    }
  }
}

}  // namespace aps::data
