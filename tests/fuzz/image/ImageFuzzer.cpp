// libFuzzer harness for image and segmentation-label files (decoded by OpenCV, then checked
// by data/ImageDecode): the first byte picks an RGB image, an index label map or a Pascal
// VOC palette label map; the rest is the file.
#include "data/ImageDecode.h"
#include "framework/core/Error.h"
#include "tests/fuzz/FuzzFiles.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string path = aps::fuzz::writeScratchFile("input.img", data + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        aps::data::Image image;
        aps::data::decodeImageFile(path, image);
        break;
      }
      case 1: {
        aps::data::LabelMap labels;
        aps::data::decodeLabelFile(path, aps::data::LabelEncoding::kIndex, 19, labels);
        break;
      }
      default: {
        aps::data::LabelMap labels;
        aps::data::decodeLabelFile(path, aps::data::LabelEncoding::kVocPalette, 21, labels);
        break;
      }
    }
  } catch (const aps::Error&) {
  }
  return 0;
}
