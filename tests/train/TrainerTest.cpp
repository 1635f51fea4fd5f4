// The trainer end to end on simulated ranks: it learns, resumes bit-identically, reports its
// metrics and refuses inputs it cannot train on.
#include "framework/core/Error.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Trainer.h"
#include "tests/train/TrainerTestSupport.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace aps::train {
namespace {

using testing::bitIdentical;
using testing::smallConfig;
using testing::trainLosses;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
      GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("aps-trainer-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TrainerTest, SimulatedRanksLearnWithFp8AndAps) {
  auto config =
      smallConfig("sim", 2,
                  {"epochs=2", "seed=1", "data.train_samples=1024", "data.batch_size=16", "optimizer.lr=0.1",
                   "precision.format=e4m3", "precision.scaling=aps", "logging.metrics_file=" + path("metrics.jsonl")});
  Trainer trainer(config, nullptr);
  const TrainSummary summary = trainer.run();
  EXPECT_EQ(summary.steps, 2 * 1024 / (2 * 16));
  EXPECT_EQ(summary.skippedSteps, 0);
  const auto losses = trainLosses(path("metrics.jsonl"));
  ASSERT_EQ(static_cast<int64_t>(losses.size()), summary.steps);
  double first = 0, last = 0;
  for (int i = 0; i < 8; ++i) {
    first += losses[static_cast<size_t>(i)] / 8;
    last += losses[losses.size() - 1 - static_cast<size_t>(i)] / 8;
  }
  EXPECT_GT(first, 2.0);         // ~ln(10) at the start
  EXPECT_LT(last, 0.6 * first);  // and well below after 64 steps
  EXPECT_GT(summary.top1, 0.3);  // well above chance (0.1) on held-out images after 64 small steps
}

TEST_F(TrainerTest, ResumeContinuesBitIdentically) {
  const std::vector<std::string> common{"epochs=2", "precision.format=e5m2", "precision.scaling=aps",
                                        "precision.rounding=stochastic"};
  NamedTensors straight;
  {
    Trainer trainer(smallConfig("sim", 2, common), nullptr);
    trainer.run();
    straight = trainer.modelState();
  }
  auto first = common;
  first.push_back("max_steps=21");  // stop in the middle of epoch 2
  first.push_back("checkpoint.dir=" + path("ckpt"));
  {
    Trainer trainer(smallConfig("sim", 2, first), nullptr);
    trainer.run();
  }
  const auto checkpoints = listCheckpoints(path("ckpt"));
  ASSERT_FALSE(checkpoints.empty());
  const Checkpoint c = loadCheckpoint(checkpoints.back());
  EXPECT_EQ(c.globalStep, 21);
  EXPECT_EQ(c.epoch, 1);
  EXPECT_EQ(c.batchInEpoch, 5);
  Trainer resumed(smallConfig("sim", 2, common), nullptr);
  resumed.run(checkpoints.back());
  std::string diff;
  EXPECT_TRUE(bitIdentical(straight, resumed.modelState(), &diff)) << "first difference: " << diff;
}

TEST_F(TrainerTest, KeepsTheLastCheckpointsAndExportsFinalWeights) {
  Trainer trainer(smallConfig("sim", 2, {"epochs=3", "checkpoint.dir=" + path("ckpt"), "checkpoint.keep=2"}), nullptr);
  trainer.run();
  const auto checkpoints = listCheckpoints(path("ckpt"));
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_EQ(loadCheckpoint(checkpoints.back()).globalStep, 48);
  EXPECT_TRUE(std::filesystem::exists(path("ckpt/final.safetensors")));
}

TEST_F(TrainerTest, RefusesCheckpointsOfAnotherRunOrCorruptFiles) {
  Trainer trainer(smallConfig("sim", 2, {"checkpoint.dir=" + path("ckpt")}), nullptr);
  trainer.run();
  const std::string ckpt = listCheckpoints(path("ckpt")).back();
  Trainer other(smallConfig("sim", 2, {"optimizer.lr=0.01"}), nullptr);
  try {
    other.run(ckpt);
    FAIL() << "expected a configuration mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different configuration"), std::string::npos) << e.what();
  }
  // Flip one byte of the tensor data: the checksum catches it.
  {
    std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    f.seekp(-5, std::ios::end);
    f.write(&byte, 1);
  }
  Trainer again(smallConfig("sim", 2, {}), nullptr);
  try {
    again.run(ckpt);
    FAIL() << "expected a checksum error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  Trainer missing(smallConfig("sim", 2, {}), nullptr);
  EXPECT_THROW(missing.run(path("nope.safetensors")), Error);
}

TEST_F(TrainerTest, RefusesToStartWhenARankHasNoFullBatch) {
  // 64 ranks x batch 8 > 256 samples: rank shards of 4 samples hold no batch.
  Trainer trainer(smallConfig("sim", 64, {}), nullptr);
  try {
    trainer.run();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.batch_size = 8 is larger than a rank's shard"), std::string::npos)
        << e.what();
  }
}

TEST_F(TrainerTest, RejectsAModelThatDoesNotFitTheData) {
  auto config = smallConfig("sim", 2, {"model.in_channels=3"});
  Trainer trainer(config, nullptr);
  EXPECT_THROW(trainer.run(), Error);
  EXPECT_THROW(Trainer(smallConfig("sim", 2, {"model.name=resnet21"}), nullptr), Error);
}

TEST_F(TrainerTest, HybridRulesGiveLayersTheirOwnFormat) {
  auto config = smallConfig("sim", 2,
                            {"precision.format=e3m0", "precision.scaling=aps",
                             "precision.hybrid=[{pattern: 'fc.*', format: fp16}, {pattern: 'conv1.*', format: bf16}]",
                             "max_steps=4", "logging.metrics_file=" + path("m.jsonl")});
  Trainer trainer(config, nullptr);
  const auto summary = trainer.run();
  EXPECT_EQ(summary.steps, 4);
  // The per-layer statistics name fc and conv1 layers with 16-bit formats: nothing flushed.
  std::ifstream in(path("m.jsonl"));
  std::string line;
  std::getline(in, line);
  const auto j = nlohmann::json::parse(line);
  bool sawFc = false;
  for (const auto& layer : j.at("layers")) {
    if (layer.at("name") == "fc.weight") {
      sawFc = true;
      EXPECT_EQ(layer.at("flushed").get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(sawFc);
}

}  // namespace
}  // namespace aps::train
