#include "data/MnistFiles.h"

#include "data/FileBytes.h"
#include "framework/core/Error.h"

#include <filesystem>

namespace aps::data {

namespace {

// The stem's plain file if present, else its .gz (the name reported when neither exists).
std::string findIdxFile(const std::string& dir, const std::string& stem, const std::string& hint) {
  const std::filesystem::path plain = std::filesystem::path(dir) / stem;
  if (std::filesystem::exists(plain)) return plain.string();
  const std::string gz = plain.string() + ".gz";
  requirePath(gz, "idx file", hint);
  return gz;
}

}  // namespace

std::shared_ptr<IdxSource> openMnistLayout(const std::string& dir, const std::string& split, const std::string& hint) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test" || split == "val") {
    prefix = "t10k";
  } else {
    APS_FAIL("unknown split '{}' for the MNIST layout in {} (expected train, test or val)", split, dir);
  }
  requirePath(dir, "dataset folder", hint);
  const std::string images = findIdxFile(dir, prefix + "-images-idx3-ubyte", hint);
  const std::string labels = findIdxFile(dir, prefix + "-labels-idx1-ubyte", hint);
  return std::make_shared<IdxSource>(images, labels, 10);
}

std::shared_ptr<IdxSource> openFashionMnist(const std::string& split, const std::string& dir) {
  return openMnistLayout(dir, split, "Fashion-MNIST: apt-get install dataset-fashion-mnist");
}

}  // namespace aps::data
