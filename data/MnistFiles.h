#pragma once

#include "data/IdxSource.h"

#include <memory>
#include <string>

namespace aps::data {

// Where Debian's dataset-fashion-mnist package installs Fashion-MNIST (Xiao et al. 2017).
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The MNIST file layout: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each plain or .gz.
// split is "train" (60,000 for MNIST and Fashion-MNIST) or "test"/"val" (10,000). A missing
// file is reported with its path and `hint`.
std::shared_ptr<IdxSource> openMnistLayout(const std::string& dir, const std::string& split,
                                           const std::string& hint = {});

// Fashion-MNIST from `dir` (default: the Debian package's folder); when missing, the error
// names the path and says `apt-get install dataset-fashion-mnist`.
std::shared_ptr<IdxSource> openFashionMnist(const std::string& split, const std::string& dir = kFashionMnistDir);

}  // namespace aps::data
