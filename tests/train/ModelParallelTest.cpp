// Model parallelism (parallel.model_parallel, framework/train/ModelParallel.h) end to end on
// simulated ranks: a split run trains as the unsplit one up to the order of fp32 additions, the
// activations travel in the format asked for (bytes counted), checkpoints hold whole layers
// and resume with another split, and bad settings are refused naming the key.
#include "framework/core/Error.h"
#include "framework/train/Trainer.h"
#include "tests/common/Datasets.h"
#include "tests/train/TrainerTestSupport.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace aps::train {
namespace {

namespace fs = std::filesystem;
using testing::bitIdentical;
using testing::maxRelativeDifference;
using testing::smallConfig;

class ModelParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    APS_REQUIRE_FASHION_MNIST();
    dir_ = fs::temp_directory_path() /
           ("aps-mp-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // An MLP 784-64-32-10 on `world` simulated ranks x batch 8 (128 images: 16 / world steps per
  // epoch), SGD with momentum; fc1 and fc2 split when `m` > 1, fc3 replicated.
  static TrainConfig config(int world, int m, std::vector<std::string> extra = {}) {
    std::vector<std::string> keys{"model.name=mlp",        "model.widths=[784, 64, 32]", "data.train_samples=128",
                                  "data.test_samples=64",  "data.augment=false",         "optimizer.momentum=0.9",
                                  "schedule.name=constant"};
    if (m > 1) {
      keys.push_back("parallel.model_parallel=" + std::to_string(m));
      keys.push_back("parallel.split=[fc1, fc2]");
    }
    keys.insert(keys.end(), extra.begin(), extra.end());
    return smallConfig("sim", world, keys);
  }

  static std::vector<nlohmann::json> trainRecords(const std::string& file) {
    std::vector<nlohmann::json> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.at("type") == "train") out.push_back(std::move(j));
    }
    return out;
  }

  fs::path dir_;
};

// The largest over the float tensors of ||a - b|| / ||b|| (the relative error of a as an
// approximation of b; tensors where b is zero are compared exactly).
double maxRelativeError(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const Tensor x = a[i].tensor.contiguous(), y = b[i].tensor.contiguous();
    if (x.dtype() != DType::Float32) continue;
    double err = 0, ref = 0;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double d = static_cast<double>(x.data<float>()[j]) - y.data<float>()[j];
      err += d * d;
      ref += static_cast<double>(y.data<float>()[j]) * y.data<float>()[j];
    }
    worst = std::max(worst, ref > 0 ? std::sqrt(err / ref) : (err > 0 ? 1.0 : 0.0));
  }
  return worst;
}

// A copy of a state (modelState() holds the live tensors, which training changes).
NamedTensors copyOf(const NamedTensors& state) {
  NamedTensors out;
  for (const auto& [name, tensor] : state) out.push_back({name, tensor.contiguous().clone()});
  return out;
}

// after - before, tensor by tensor.
NamedTensors difference(const NamedTensors& after, const NamedTensors& before) {
  NamedTensors out;
  for (size_t i = 0; i < after.size(); ++i) {
    Tensor d = after[i].tensor.contiguous().clone();
    const Tensor b = before[i].tensor.contiguous();
    if (d.dtype() != DType::Float32) {  // counters (batch norm's num_batches_tracked)
      out.push_back({after[i].name, d});
      continue;
    }
    for (int64_t k = 0; k < d.numel(); ++k) d.data<float>()[k] -= b.data<float>()[k];
    out.push_back({after[i].name, d});
  }
  return out;
}

TEST_F(ModelParallel, SplitRunTrainsAsTheUnsplitRun) {
  // 2 data-parallel groups x 2 model-parallel ranks against 2 ranks unsplit: the same batches,
  // the same initial weights (the split layers are cut from the unsplit init).
  Trainer splitOne(config(4, 2, {"max_steps=1"}), nullptr), unsplitOne(config(2, 1, {"max_steps=1"}), nullptr);
  const NamedTensors initial = copyOf(unsplitOne.modelState());
  EXPECT_TRUE(bitIdentical(splitOne.modelState(), initial)) << "the split model starts from other weights";
  splitOne.run();
  unsplitOne.run();
  // The first step's update (lr x gradient) to fp32 rounding: the input gradients are sums of
  // two partial products, and Eigen's GEMM micro-kernels group a product's additions by its
  // width (32 outputs of a slice against 64 of the whole layer), so the activations differ in
  // their last bits too (measured: 1.7e-6 at most, fc2's weight).
  const double first = maxRelativeError(difference(splitOne.modelState(), initial),
                                        difference(unsplitOne.modelState(), initial));
  EXPECT_LT(first, 5e-6) << "the first step's gradients differ";
  EXPECT_GT(first, 0.0) << "the same bits: the split layers may not have run";
  Trainer split(config(4, 2, {"max_steps=20"}), nullptr), unsplit(config(2, 1, {"max_steps=20"}), nullptr);
  split.run();
  unsplit.run();
  const double last = maxRelativeDifference(split.modelState(), unsplit.modelState());
  EXPECT_LT(last, 1e-4) << "20 steps apart";
  // Activations in E4M3 are another run: the comparison above can tell.
  Trainer e4m3(config(4, 2, {"max_steps=20", "parallel.activation_format=e4m3"}), nullptr);
  e4m3.run();
  EXPECT_GT(maxRelativeDifference(e4m3.modelState(), unsplit.modelState()), 1e-3);
}

TEST_F(ModelParallel, ResNetClassifierSplitsToo) {
  // ResNet-20's classifier `fc` (64 -> 10) split over 2 ranks: the first step's update is the
  // unsplit model's up to rounding (later steps are not compared: in this batch-norm network at
  // batch 8 a relative change of 2e-6 in the LR already moves the weights by 4e-3 in 3 steps).
  auto resnet = [](int world, int m) {
    std::vector<std::string> keys{"max_steps=1"};
    if (m > 1) keys.insert(keys.end(), {"parallel.model_parallel=2", "parallel.split=[fc]"});
    return smallConfig("sim", world, keys);
  };
  Trainer split(resnet(4, 2), nullptr), unsplit(resnet(2, 1), nullptr);
  const NamedTensors initial = copyOf(unsplit.modelState());
  split.run();
  unsplit.run();
  const NamedTensors a = difference(split.modelState(), initial), b = difference(unsplit.modelState(), initial);
  // The classifier's own update to fp32 rounding; the rest of the network to the rounding that
  // batch norm's sums over the batch amplify (measured 5.5e-5 at most, a batch norm's scale).
  NamedTensors fcA, fcB;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name.starts_with("fc.")) {
      fcA.push_back(a[i]);
      fcB.push_back(b[i]);
    }
  }
  ASSERT_EQ(fcA.size(), 2u);
  EXPECT_LT(maxRelativeError(fcA, fcB), 5e-6);
  EXPECT_LT(maxRelativeError(a, b), 2e-4);
}

TEST_F(ModelParallel, ActivationsTravelInTheFormatAsked) {
  // Per step, model-parallel rank 0 sends its slice of fc1's and fc2's activations (8 x 32 and
  // 8 x 16 values) and its partial of fc2's input gradient (8 x 64; fc1's input is the images,
  // which need none) to the other rank: in fp32 4 bytes a value, in E4M3 one plus a 4-byte
  // scale header per message, in Dettmers' dynamic tree one plus its absmax.
  auto bytesPerStep = [&](const std::string& format) {
    const std::string metrics = path(format + ".jsonl");
    Trainer t(config(4, 2, {"max_steps=3", "parallel.activation_format=" + format, "logging.metrics_file=" + metrics}),
              nullptr);
    t.run();
    const auto records = trainRecords(metrics);
    EXPECT_EQ(records.size(), 3u);
    std::vector<uint64_t> out;
    for (const auto& r : records) out.push_back(r.at("mp_bytes").get<uint64_t>());
    return out;
  };
  const uint64_t values = 8 * 32 + 8 * 16 + 8 * 64;
  EXPECT_EQ(bytesPerStep("fp32"), std::vector<uint64_t>(3, values * 4));
  EXPECT_EQ(bytesPerStep("e4m3"), std::vector<uint64_t>(3, values + 3 * 4));
  const auto dettmers = bytesPerStep("dettmers_dynamic");
  EXPECT_LT(dettmers.front(), values * 2) << "Dettmers' type sent wider than 8 bits";
  EXPECT_GE(dettmers.front(), values);
}

TEST_F(ModelParallel, LowPrecisionActivationsLearnAndReportTheirError) {
  const std::string metrics = path("m.jsonl");
  Trainer t(config(4, 2, {"epochs=4", "parallel.activation_format=dettmers_dynamic", "logging.metrics_file=" + metrics}),
            nullptr);
  t.run();
  const auto records = trainRecords(metrics);
  ASSERT_GE(records.size(), 12u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 4; ++i) {
    first += records[i].at("loss").get<double>() / 4;
    last += records[records.size() - 1 - i].at("loss").get<double>() / 4;
  }
  EXPECT_LT(last, 0.8 * first);
  const auto& layers = records.back().at("mp_layers");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].at("name"), "fc1");
  // Dettmers' 8-bit tree: a relative error of a few percent, above fp32's zero.
  const double error = layers[1].at("activation_rel_error").get<double>();
  EXPECT_GT(error, 1e-3);
  EXPECT_LT(error, 0.2);
  EXPECT_TRUE(layers[0].at("error_rel_error").is_null()) << "fc1's input needs no gradient";
  EXPECT_GT(layers[1].at("error_rel_error").get<double>(), 1e-3);
}

TEST_F(ModelParallel, CheckpointsHoldWholeLayersAndResumeWithAnotherSplit) {
  const std::string dir = path("ckpt");
  const std::vector<std::string> format{"parallel.activation_format=e4m3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), format.begin(), format.end());
    return extra;
  };
  Trainer straight(config(4, 2, with({"max_steps=10"})), nullptr);
  straight.run();
  {
    Trainer stopped(config(4, 2, with({"max_steps=4", "checkpoint.dir=" + dir})), nullptr);
    stopped.run();
  }
  const std::string checkpoint = dir + "/checkpoint-0000000004.safetensors";
  ASSERT_TRUE(fs::exists(checkpoint));
  Trainer resumed(config(4, 2, with({"max_steps=10"})), nullptr);
  resumed.run(checkpoint);
  std::string diff;
  EXPECT_TRUE(bitIdentical(straight.modelState(), resumed.modelState(), &diff)) << "first difference: " << diff;
  // The checkpoint's layers are whole: the unsplit model (2 ranks) and a split over 4 resume
  // from it, and with fp32 activations both continue as the split run does.
  Trainer fp32(config(4, 2, {"max_steps=10"}), nullptr);
  fp32.run();
  {
    Trainer stopped(config(4, 2, {"max_steps=4", "checkpoint.dir=" + dir + "32"}), nullptr);
    stopped.run();
  }
  auto resumedFrom = [&](TrainConfig c) {
    Trainer t(std::move(c), nullptr);
    t.run(dir + "32/checkpoint-0000000004.safetensors");
    return t.modelState();
  };
  EXPECT_LT(maxRelativeDifference(resumedFrom(config(2, 1, {"max_steps=10"})), fp32.modelState()), 1e-4) << "unsplit";
  EXPECT_LT(maxRelativeDifference(resumedFrom(config(8, 4, {"max_steps=10"})), fp32.modelState()), 1e-4) << "M = 4";
}

TEST_F(ModelParallel, BadSettingsAreRefusedNamingTheKey) {
  auto refused = [&](const std::vector<std::string>& keys, int world, const std::string& expected) {
    try {
      Trainer t(config(world, 2, keys), nullptr);
      t.run();
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({"parallel.split=[fc9]"}, 4, "parallel.split: 'fc9' matches no linear layer of the model (its linear layers: "
                                        "fc1, fc2, fc3)");
  refused({}, 3, "'parallel.model_parallel' = 2 must divide 'comm.world_size' = 3");
  refused({"model.widths=[784, 63, 32]"}, 4, "layer 'fc1' has 63 output features");
  refused({"precision.error_feedback=true", "precision.format=e4m3"}, 4, "does not combine with precision.error_feedback");
  refused({"parallel.activation_format=e9m9"}, 4, "parallel.activation_format");
}

}  // namespace
}  // namespace aps::train
