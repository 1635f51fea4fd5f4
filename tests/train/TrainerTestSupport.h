#pragma once

// Small, fast training configs on the real Fashion-MNIST for trainer tests.
#include "framework/tensor/NamedTensor.h"
#include "framework/train/Config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace aps::train::testing {

// ResNet-20 on 256 Fashion-MNIST images per epoch, batch 8 per rank, no augmentation
// randomness beyond the seeded recipe, multistep schedule (independent of the run length).
inline TrainConfig smallConfig(const std::string& backend, int world, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides{"comm.backend=" + backend,
                                     "data.train_samples=256",
                                     "data.test_samples=200",
                                     "data.batch_size=8",
                                     "data.workers=1",
                                     "epochs=1",
                                     "threads=1",
                                     "optimizer.lr=0.05",
                                     "schedule.name=multistep",
                                     "schedule.milestones=[100]",
                                     "logging.interval=1",
                                     "logging.level=warn",
                                     "logging.progress=false",
                                     "output_dir=none"};
  if (backend == "sim") overrides.push_back("comm.world_size=" + std::to_string(world));
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return parseConfig("model: {name: resnet20, num_classes: 10, in_channels: 1}\n", "test.yaml", overrides);
}

// The child-process tests' run: 2 simulated ranks x batch 8 over 48 images (3 steps per
// epoch), 8 epochs, E4M3 + APS; `logging` and `checkpoint` are the flow maps of those sections.
inline std::string tinyConfigText(const std::string& logging, const std::string& checkpoint) {
  return "model: {name: resnet20, num_classes: 10, in_channels: 1}\n"
         "data: {dataset: fashion_mnist, batch_size: 8, workers: 1, train_samples: 48,\n"
         "       test_samples: 16, augment: true}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "schedule: {name: multistep, milestones: [100]}\n"
         "comm: {backend: sim, world_size: 2}\n"
         "precision: {format: e4m3, scaling: aps}\n"
         "epochs: 8\nthreads: 1\nseed: 7\n"
         "logging: " +
         logging + "\ncheckpoint: " + checkpoint + "\n";
}

// The largest |a - b| over every float tensor, relative to the largest |a| of the same tensor
// (its scale, so that values near zero do not dominate); the states must match name for name.
inline double maxRelativeDifference(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    const Tensor x = a[i].tensor.contiguous(), y = b[i].tensor.contiguous();
    EXPECT_EQ(x.sizes(), y.sizes()) << a[i].name;
    if (x.dtype() != DType::Float32 || x.sizes() != y.sizes()) continue;
    double scale = 0, diff = 0;
    for (int64_t j = 0; j < x.numel(); ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(x.data<float>()[j])));
      diff = std::max(diff, std::abs(static_cast<double>(x.data<float>()[j]) - y.data<float>()[j]));
    }
    if (scale > 0) worst = std::max(worst, diff / scale);
  }
  return worst;
}

// True when both states hold the same names, shapes and bits.
inline bool bitIdentical(const NamedTensors& a, const NamedTensors& b, std::string* firstDifference = nullptr) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor x = a[i].tensor.contiguous(), y = b[i].tensor.contiguous();
    const size_t bytes = static_cast<size_t>(x.numel()) * dtypeSize(x.dtype());
    if (a[i].name != b[i].name || x.sizes() != y.sizes() || x.dtype() != y.dtype() ||
        std::memcmp(x.rawData(), y.rawData(), bytes) != 0) {
      if (firstDifference) *firstDifference = a[i].name;
      return false;
    }
  }
  return true;
}

// The "loss" of every "train" line of a metrics file, in order.
inline std::vector<double> trainLosses(const std::string& metricsFile) {
  std::vector<double> losses;
  std::ifstream in(metricsFile);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") == "train") losses.push_back(j.at("loss").get<double>());
  }
  return losses;
}

}  // namespace aps::train::testing
