#pragma once

#include "data/Example.h"

#include <cstdint>
#include <string>

namespace aps::data {

// The most pixels a decoder accepts from any file, whatever a dataset asks: 2^26 is 8192 x 8192,
// 32 times a Cityscapes frame; decoding one (16-bit PNG or progressive JPEG, then the RGB copy)
// peaks below 1 GiB, where 2^28 pixels peaked near the fuzzers' 2 GiB limit.
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 26;

// Before anything is allocated or decoded, a file is refused with an aps::Error naming it when
// its header declares more than min(maxPixels, kMaxImagePixels) pixels, or more pixels than
// its bytes can encode (JPEG: 512 pixels a byte; PNG: 1032 scanline bytes a byte; the reasons
// are in ImageDecode.cpp), so the work of a decode is bounded by the size of its input.

// Decodes a JPEG/PNG/... file with OpenCV into 8-bit RGB (OpenCV decodes to BGR; grey images
// are expanded to three channels). EXIF orientation is ignored, as PIL (torchvision's
// ImageFolder loader) ignores it. Throws aps::Error naming the file when it is missing or
// cannot be decoded, or is refused by the limits above.
void decodeImageFile(const std::string& path, Image& out, uint64_t maxPixels = kMaxImagePixels);

// How a segmentation label PNG encodes classes.
enum class LabelEncoding {
  kIndex,      // one 8-bit channel holding the class index (Cityscapes *_labelTrainIds.png)
  kVocPalette  // Pascal VOC's indexed PNGs; OpenCV expands the palette to colours, which are
               // mapped back to indices through VOC's colour map (an 8-bit grey PNG of indices
               // is accepted as well)
};

// Decodes a label PNG into class indices; every value must be below numClasses or be
// kIgnoreLabel, otherwise aps::Error names the file, the value and the pixel.
void decodeLabelFile(const std::string& path, LabelEncoding encoding, int64_t numClasses, LabelMap& out,
                     uint64_t maxPixels = kMaxImagePixels);

// Pascal VOC's colour for class index i (the devkit's labelcolormap / bitget construction).
void vocPaletteColour(int index, uint8_t rgb[3]);

}  // namespace aps::data
