// libFuzzer harness for the idx (MNIST) reader: the input holds both files, the label file
// first: 2 bytes little-endian length L, L bytes of labels, the rest is the image file
// (either may be gzipped). Every example that loads is read back.
#include "data/IdxSource.h"
#include "framework/core/Error.h"
#include "tests/fuzz/FuzzFiles.h"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t labelBytes = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
  const std::string labels = aps::fuzz::writeScratchFile("labels-idx1-ubyte", data + 2, labelBytes);
  const std::string images =
      aps::fuzz::writeScratchFile("images-idx3-ubyte", data + 2 + labelBytes, size - 2 - labelBytes);
  try {
    const aps::data::IdxSource source(images, labels, 10);
    aps::data::Example example;
    for (int64_t i = 0; i < source.size(); ++i) source.read(i, example);
  } catch (const aps::Error&) {
  }
  return 0;
}
