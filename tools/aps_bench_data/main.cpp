// aps_bench_data: how fast the input pipeline is. Generates an ImageNet-layout folder of
// JPEGs and measures decode throughput (one thread) and loader throughput with the ImageNet
// training recipe; then measures loader throughput over Fashion-MNIST with each worker count,
// with and without a simulated training step, reporting how long the consumer waited. JSON out.
#include "data/DatasetRecipes.h"
#include "data/GeometricTransforms.h"
#include "data/ImageFolderSource.h"
#include "data/Loader.h"
#include "data/MnistFiles.h"
#include "data/Normalize.h"
#include "data/SampleRng.h"
#include "framework/core/Error.h"
#include "tools/common/ToolMain.h"

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using aps::data::Batch;
using aps::data::Loader;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Smooth colour gradients with mild noise: JPEG sizes and decode cost close to photographs'.
void writeFolder(const fs::path& root, int images, int classes, int height, int width) {
  std::mt19937 gen(1);
  std::uniform_int_distribution<int> noise(-12, 12);
  cv::Mat bgr(height, width, CV_8UC3);
  for (int i = 0; i < images; ++i) {
    const fs::path dir = root / "train" / ("n" + std::to_string(1000 + i % classes));
    fs::create_directories(dir);
    const double fx = 0.01 + 0.002 * (i % 7), fy = 0.013 + 0.003 * (i % 5);
    for (int y = 0; y < height; ++y) {
      auto* row = bgr.ptr<cv::Vec3b>(y);
      for (int x = 0; x < width; ++x) {
        for (int c = 0; c < 3; ++c) {
          const double v = 128 + 100 * std::sin(fx * x * (c + 1) + fy * y + i);
          row[x][c] = cv::saturate_cast<uint8_t>(v + noise(gen));
        }
      }
    }
    const std::string path = (dir / ("img_" + std::to_string(i) + ".JPEG")).string();
    APS_CHECK(cv::imwrite(path, bgr, {cv::IMWRITE_JPEG_QUALITY, 90}), "cannot write {}", path);
  }
}

struct EpochResult {
  double seconds = 0;
  aps::data::LoaderStats stats;
};

// Drains one epoch; stepMs > 0 simulates a training step per batch (busy wait) so the wait
// figure shows whether loading keeps up with compute.
EpochResult runEpoch(Loader& loader, const std::vector<int64_t>& indices, double stepMs) {
  loader.resetStats();
  const auto start = Clock::now();
  loader.startEpoch(0, indices);
  Batch batch;
  while (loader.next(batch)) {
    if (stepMs > 0) {
      const auto t = Clock::now();
      while (since(t) * 1e3 < stepMs) {
      }
    }
  }
  return {since(start), loader.stats()};
}

nlohmann::json describe(const EpochResult& r, int workers, double stepMs) {
  return {{"workers", workers},
          {"step_ms", stepMs},
          {"samples", r.stats.samples},
          {"seconds", r.seconds},
          {"samples_per_s", static_cast<double>(r.stats.samples) / r.seconds},
          {"wait_s", r.stats.waitSeconds},
          {"wait_fraction", r.stats.waitSeconds / r.seconds},
          {"max_wait_ms", r.stats.maxWaitSeconds * 1e3},
          {"stalls", r.stats.stalls}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measures image decode and data-loader throughput; prints JSON", "aps_bench_data"};
  int images = 128, height = 375, width = 500, batchSize = 128;
  std::vector<int> workerCounts = {0, 1, 2};
  double stepMs = 5.0;
  std::string fashionDir = aps::data::kFashionMnistDir;
  app.add_option("--images", images, "images in the generated folder")->check(CLI::PositiveNumber);
  app.add_option("--height", height, "generated image height")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "generated image width")->check(CLI::PositiveNumber);
  app.add_option("--batch", batchSize, "Fashion-MNIST batch size")->check(CLI::PositiveNumber);
  app.add_option("--workers", workerCounts, "worker counts to measure");
  app.add_option("--step-ms", stepMs, "simulated training step per Fashion-MNIST batch (0: none)");
  app.add_option("--fashion-mnist", fashionDir, "Fashion-MNIST folder");
  return aps::runTool(app, argc, argv, [&] {
    nlohmann::json out;
    const fs::path root = fs::temp_directory_path() / ("aps_bench_data_" + std::to_string(std::random_device{}()));
    try {
      writeFolder(root, images, 8, height, width);
      const aps::data::ImageFolderSource folder((root / "train").string());
      aps::data::Example ex;
      const auto start = Clock::now();
      for (int64_t i = 0; i < folder.size(); ++i) folder.read(i, ex);
      const double decode = since(start);
      nlohmann::json folderJson = {{"images", folder.size()},
                                   {"height", height},
                                   {"width", width},
                                   {"format", "JPEG q90"},
                                   {"decode_images_per_s_1_thread", static_cast<double>(folder.size()) / decode}};
      const auto dataset = aps::data::makeDataset({.name = "imagenet", .root = root.string(), .split = "train"});
      {
        // The recipe's transforms alone (RandomResizedCrop(224) + flip + normalise) on one decoded image.
        const aps::data::RandomResizedCrop crop(224);
        const aps::data::RandomHorizontalFlip flip;
        const aps::data::Normalize norm({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
        std::vector<float> floats(3 * 224 * 224);
        aps::data::Example decoded;
        folder.read(0, decoded);
        const int reps = 200;
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) {
          aps::data::Example copy = decoded;
          aps::Rng rng = aps::data::sampleRng(0, 0, static_cast<uint64_t>(i));
          crop.apply(copy, rng);
          flip.apply(copy, rng);
          norm.apply(copy.image, floats.data());
        }
        folderJson["train_transforms_images_per_s_1_thread"] = reps / since(t0);
      }
      std::vector<int64_t> order(static_cast<size_t>(dataset->size()));
      std::iota(order.begin(), order.end(), 0);
      for (int w : workerCounts) {
        Loader loader(dataset, {.batchSize = 32, .workers = w, .prefetch = 4, .dropLast = false, .seed = 0});
        folderJson["imagenet_train_recipe_loader"].push_back(describe(runEpoch(loader, order, 0), w, 0));
      }
      out["image_folder"] = folderJson;
    } catch (...) {
      fs::remove_all(root);
      throw;
    }
    fs::remove_all(root);

    const auto fashion = aps::data::makeDataset({.name = "fashion_mnist", .root = fashionDir, .split = "train"});
    std::vector<int64_t> order(static_cast<size_t>(fashion->size()));
    std::iota(order.begin(), order.end(), 0);
    nlohmann::json fm = {
        {"samples", fashion->size()}, {"batch", batchSize}, {"recipe", "RandomCrop(28,2)+flip+normalize"}};
    for (int w : workerCounts) {
      Loader loader(fashion, {.batchSize = batchSize, .workers = w, .prefetch = 4, .dropLast = false, .seed = 0});
      fm["loader"].push_back(describe(runEpoch(loader, order, 0), w, 0));
      if (stepMs > 0) fm["loader"].push_back(describe(runEpoch(loader, order, stepMs), w, stepMs));
    }
    out["fashion_mnist"] = fm;
    std::cout << out.dump(2) << "\n";
  });
}
