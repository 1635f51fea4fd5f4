#pragma once

#include "data/Example.h"

#include <string>

namespace aps::data {

// Decodes a JPEG/PNG/... file with OpenCV into 8-bit RGB (OpenCV decodes to BGR; grey images
// are expanded to three channels). EXIF orientation is ignored, as PIL (torchvision's
// ImageFolder loader) ignores it. Throws aps::Error naming the file when it is missing or
// cannot be decoded.
void decodeImageFile(const std::string& path, Image& out);

// How a segmentation label PNG encodes classes.
enum class LabelEncoding {
  kIndex,      // one 8-bit channel holding the class index (Cityscapes *_labelTrainIds.png)
  kVocPalette  // Pascal VOC's indexed PNGs; OpenCV expands the palette to colours, which are
               // mapped back to indices through VOC's colour map (an 8-bit grey PNG of indices
               // is accepted as well)
};

// Decodes a label PNG into class indices; every value must be below numClasses or be
// kIgnoreLabel, otherwise aps::Error names the file, the value and the pixel.
void decodeLabelFile(const std::string& path, LabelEncoding encoding, int64_t numClasses, LabelMap& out);

// Pascal VOC's colour for class index i (the devkit's labelcolormap / bitget construction).
void vocPaletteColour(int index, uint8_t rgb[3]);

}  // namespace aps::data
