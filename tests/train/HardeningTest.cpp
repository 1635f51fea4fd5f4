// Inputs a hostile or clumsy user gives aps_train's checkpoints and metrics: each is refused
// with a message naming the file and field, or reported as what it is (inf, NaN, overflow),
// never a crash, a silent wrong resume or a lost checkpoint.
#include "framework/core/Error.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/EvalMetrics.h"
#include "framework/train/Trainer.h"
#include "tests/common/Datasets.h"
#include "tests/common/ErrorMessage.h"
#include "tests/train/TrainerTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

namespace aps::train {
namespace {

namespace fs = std::filesystem;
using testing::smallConfig;
using testsupport::errorOf;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("aps-hardening-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Checkpoint smallCheckpoint(int64_t epoch, int64_t batch, int64_t step) {
  Checkpoint c;
  c.modelName = "resnet20";
  c.configHash = 0x1234;
  c.epoch = epoch;
  c.batchInEpoch = batch;
  c.globalStep = step;
  c.tensors.push_back({"model.w", Tensor::ones({3})});
  return c;
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One character of the header changed ("batch_in_epoch" 2 -> 3): the checksum covers the header.
TEST(CheckpointHeader, AnEditedHeaderFailsTheChecksum) {
  const fs::path dir = scratch("header");
  const std::string path = (dir / "checkpoint-0000000018.safetensors").string();
  saveCheckpoint(path, smallCheckpoint(1, 2, 18));
  EXPECT_EQ(loadCheckpoint(path).batchInEpoch, 2);
  std::string bytes = readBytes(path);
  const std::string field = "\"batch_in_epoch\":\"2\"";
  const auto at = bytes.find(field);
  ASSERT_NE(at, std::string::npos);
  bytes[at + field.size() - 2] = '3';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  const std::string message = errorOf([&] { loadCheckpoint(path); });
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  fs::remove_all(dir);
}

// Positions that cannot belong to a run of 16 steps per epoch and 48 steps are refused by name.
TEST(CheckpointHeader, PositionsOutsideTheRunAreRefusedNamingTheField) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    int64_t epoch, batch, step;
    const char* names;
  };
  const Case cases[] = {
      {0, -1, -1, "'batch_in_epoch' = -1"},
      {1, -3, 13, "'batch_in_epoch' = -3"},
      {0, 16, 16, "'batch_in_epoch' = 16"},
      {0, 0, -5, "'global_step' = -5"},
      {1000000, 0, 16000000, "'global_step' = 16000000 is beyond"},
      {kMax, 0, kMax, "does not match"},
      {0, 2, kMax, "does not match"},
      {1, 3, 18, "does not match"},
      {-1, 0, 0, "'epoch' = -1"},
      {3, 1, 49, "is beyond this run's 48 steps"},
  };
  for (const Case& c : cases) {
    const std::string message =
        errorOf([&] { validatePosition(smallCheckpoint(c.epoch, c.batch, c.step), "x.safetensors", 16, 48); });
    EXPECT_NE(message.find(c.names), std::string::npos)
        << "epoch " << c.epoch << " batch " << c.batch << " step " << c.step << ": '" << message << "'";
    EXPECT_NE(message.find("x.safetensors"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(validatePosition(smallCheckpoint(1, 2, 18), "x.safetensors", 16, 48));
  EXPECT_NO_THROW(validatePosition(smallCheckpoint(3, 0, 48), "x.safetensors", 16, 48));  // the last one
}

// Pruning after writing step 20 into a folder that also holds step 30 (a run that got further)
// keeps the new checkpoint and the newer one, and deletes only older ones beyond `keep`.
TEST(CheckpointHeader, PruningNeverDeletesTheNewCheckpointOrANewerOne) {
  const fs::path dir = scratch("prune");
  for (int64_t step : {10, 15, 30, 20})
    saveCheckpoint(checkpointPath(dir.string(), step), smallCheckpoint(0, step, step));
  pruneCheckpoints(dir.string(), 1, 20);
  EXPECT_EQ(listCheckpoints(dir.string()),
            (std::vector<std::string>{checkpointPath(dir.string(), 20), checkpointPath(dir.string(), 30)}));
  fs::remove_all(dir);
}

TEST(EvalMetrics, CountsRefuseToOverflowAndNameWhatOverflowed) {
  EXPECT_EQ(addCount(2, 3, "x"), 5);
  EXPECT_ERROR_NAMES(addCount(std::numeric_limits<int64_t>::max(), 1, "confusion matrix"), "confusion matrix");
}

// A diverged model's test loss is reported as inf or NaN (it once overflowed int64 micro-units
// into -1152921504606.8469), and a huge finite loss as itself.
TEST(EvalMetrics, NonFiniteAndHugeLossesAreReportedAsSuch) {
  const float logits[2 * 3] = {1, 2, 3, 3, 2, 1};
  const int64_t labels[2] = {2, 1};
  for (double loss : {1e300, std::numeric_limits<double>::infinity(), std::nan("")}) {
    EvalAccumulator totals(false, 3);
    totals.addClassification(logits, labels, 2, loss);
    totals.addClassification(logits, labels, 2, 1.0);
    const TrainSummary s = totals.summary();
    EXPECT_DOUBLE_EQ(s.top1, 0.5);
    EXPECT_DOUBLE_EQ(s.top5, 1.0);
    if (std::isnan(loss)) {
      EXPECT_TRUE(std::isnan(s.loss));
    } else {
      EXPECT_EQ(s.loss, (loss * 2 + 2.0) / 4);
    }
    EXPECT_EQ(s.diverged, !std::isfinite(loss));
  }
  EXPECT_EQ(metricValue(std::nan("")), "nan");
  EXPECT_EQ(metricValue(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(metricValue(0.25), 0.25);
}

TEST(EvalMetrics, ConfusionMatrixMergesOverProcessesWithCheckedSums) {
  EvalAccumulator totals(true, 2);
  const float logits[2 * 2] = {1, 0, 0, 1};  // pixel 0 -> class 0, pixel 1 -> class 1
  const int64_t labels[2] = {0, 0};
  totals.addSegmentation(logits, labels, 1, 2);
  ASSERT_EQ(totals.counts().size(), 4u);
  EXPECT_EQ(totals.counts()[0], 1);  // label 0 predicted 0
  EXPECT_EQ(totals.counts()[1], 1);  // label 0 predicted 1
  EXPECT_EQ(totals.counts()[2], 0);
  EXPECT_EQ(totals.counts()[3], 0);
  // Two ranks' matrices summed, the second holding a count near the 64-bit limit.
  const auto overflowing = [](const std::vector<std::vector<int64_t>>& local) {
    std::vector<int64_t> out;
    for (int64_t x : local.at(0))
      out.push_back(addCount(x, x == 1 ? std::numeric_limits<int64_t>::max() : 0, "confusion matrix"));
    return out;
  };
  const auto first = [](const std::vector<std::vector<double>>& local) { return local.at(0); };
  EXPECT_ERROR_NAMES(EvalAccumulator::mergeOverRanks({totals}, overflowing, first), "confusion matrix");
  const auto same = [](const std::vector<std::vector<int64_t>>& local) { return local.at(0); };
  EXPECT_EQ(EvalAccumulator::mergeOverRanks({totals}, same, first).counts(), totals.counts());
}

class HardeningTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    APS_REQUIRE_FASHION_MNIST();
    dir_ = scratch(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// A checkpoint whose header was rewritten (with a valid checksum: a buggy or hostile writer)
// at an impossible position is refused before training, naming the file and the field. A
// negative batch_in_epoch used to crash the trainer (erasing a negative range of indices).
TEST_F(HardeningTrainerTest, ResumingFromAnImpossiblePositionIsRefused) {
  {
    Trainer trainer(smallConfig("sim", 2, {"max_steps=3", "checkpoint.dir=" + path("ckpt")}), nullptr);
    trainer.run();
  }
  const Checkpoint good = loadCheckpoint(listCheckpoints(path("ckpt")).back());
  ASSERT_EQ(good.globalStep, 3);
  struct Edit {
    std::function<void(Checkpoint&)> apply;
    const char* names;
  };
  const Edit edits[] = {
      {[](Checkpoint& c) { c.batchInEpoch = -1; }, "'batch_in_epoch' = -1"},
      {[](Checkpoint& c) { c.batchInEpoch = -3; }, "'batch_in_epoch' = -3"},
      {[](Checkpoint& c) { c.batchInEpoch = 4; }, "does not match"},
      {[](Checkpoint& c) { c.globalStep = -5; }, "'global_step' = -5"},
      {[](Checkpoint& c) { c.epoch = 1000000; }, "does not match"},
      {[](Checkpoint& c) { c.globalStep = c.epoch = std::numeric_limits<int64_t>::max(); }, "does not match"},
  };
  for (const Edit& edit : edits) {
    Checkpoint c = good;
    edit.apply(c);
    const std::string edited = path("edited.safetensors");
    saveCheckpoint(edited, c);
    Trainer trainer(smallConfig("sim", 2, {}), nullptr);
    const std::string message = errorOf([&] { trainer.run(edited); });
    EXPECT_NE(message.find(edit.names), std::string::npos) << message;
    EXPECT_NE(message.find(edited), std::string::npos) << message;
  }
}

// A fresh run pointed at another run's checkpoints refuses to start; checkpoint.overwrite
// replaces them.
TEST_F(HardeningTrainerTest, AFreshRunDoesNotOverwriteAnotherRunsCheckpoints) {
  const std::string ckpt = "checkpoint.dir=" + path("ckpt");
  {
    Trainer first(smallConfig("sim", 2, {"epochs=2", ckpt}), nullptr);
    first.run();
  }
  const auto before = listCheckpoints(path("ckpt"));
  ASSERT_EQ(before.size(), 2u);
  Trainer second(smallConfig("sim", 2, {"max_steps=3", ckpt}), nullptr);
  const std::string message = errorOf([&] { second.run(); });
  EXPECT_NE(message.find("already holds another run's checkpoints"), std::string::npos) << message;
  EXPECT_NE(message.find("checkpoint.overwrite"), std::string::npos) << message;
  EXPECT_EQ(listCheckpoints(path("ckpt")), before);
  EXPECT_ERROR_NAMES(Trainer(smallConfig("sim", 2, {"max_steps=3", ckpt}), nullptr).dryRun(), "already holds");

  Trainer replacing(smallConfig("sim", 2, {"max_steps=3", ckpt, "checkpoint.overwrite=true"}), nullptr);
  replacing.run();
  EXPECT_EQ(listCheckpoints(path("ckpt")), (std::vector<std::string>{checkpointPath(path("ckpt"), 3)}));
}

// Resumed from an older checkpoint with keep: 1, a run keeps what it writes and never deletes
// the newer checkpoints of the run it branched from.
TEST_F(HardeningTrainerTest, PruningKeepsTheCheckpointJustWritten) {
  const std::string ckpt = "checkpoint.dir=" + path("ckpt");
  {
    Trainer first(smallConfig("sim", 2, {"epochs=2", ckpt, "checkpoint.keep=2"}), nullptr);
    first.run();
  }
  Trainer branch(smallConfig("sim", 2, {"max_steps=20", ckpt, "checkpoint.keep=1"}), nullptr);
  branch.run(checkpointPath(path("ckpt"), 16));
  EXPECT_EQ(listCheckpoints(path("ckpt")),
            (std::vector<std::string>{checkpointPath(path("ckpt"), 20), checkpointPath(path("ckpt"), 32)}));
}

// A run driven to divergence (learning rate 1e5) reports its huge test loss as a positive
// number (it once overflowed int64 micro-units into a negative one) and says it diverged.
TEST_F(HardeningTrainerTest, ADivergedRunSaysSo) {
  Trainer trainer(
      smallConfig("sim", 1,
                  {"optimizer.lr=100000", "schedule.name=constant", "data.train_samples=128", "data.test_samples=64",
                   "data.batch_size=16", "epochs=2", "logging.metrics_file=" + path("m.jsonl")}),
      nullptr);
  const TrainSummary s = trainer.run();
  EXPECT_TRUE(s.diverged);
  EXPECT_TRUE(std::isnan(s.loss) || s.loss > 1.0) << s.loss;
  std::ifstream in(path("m.jsonl"));
  bool finalSaysDiverged = false;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") == "final") finalSaysDiverged = j.at("diverged").get<bool>();
  }
  EXPECT_TRUE(finalSaysDiverged);
}

// Every value the schema accepts starts a run: precision.loss_scaling: static used to be
// refused at start-up by the loss scaler (a backoff factor of 1 was out of its range).
TEST_F(HardeningTrainerTest, StaticLossScalingTrains) {
  Trainer trainer(smallConfig("sim", 2,
                              {"max_steps=3", "precision.compute=fp16_mixed", "precision.loss_scaling=static",
                               "precision.loss_scale=1024"}),
                  nullptr);
  const TrainSummary s = trainer.run();
  EXPECT_EQ(s.steps, 3);
  EXPECT_FALSE(s.diverged);
}

// --dry-run checks what the run would touch: the resume file and the output directories.
TEST_F(HardeningTrainerTest, DryRunChecksTheResumeFileAndTheOutputs) {
  EXPECT_ERROR_NAMES(Trainer(smallConfig("sim", 2, {}), nullptr).dryRun(path("absent.safetensors")),
                     path("absent.safetensors"));
  std::ofstream(path("a-file")) << "x";
  EXPECT_ERROR_NAMES(Trainer(smallConfig("sim", 2, {"checkpoint.dir=" + path("a-file/ckpt")}), nullptr).dryRun(),
                     "checkpoint.dir '" + path("a-file/ckpt") + "'");
  EXPECT_ERROR_NAMES(
      Trainer(smallConfig("sim", 2, {"logging.metrics_file=" + path("a-file/m.jsonl")}), nullptr).dryRun(),
      "logging.metrics_file");
  {
    Trainer trainer(smallConfig("sim", 2, {"max_steps=2", "checkpoint.dir=" + path("ckpt")}), nullptr);
    trainer.run();
  }
  const std::string written = checkpointPath(path("ckpt"), 2);
  EXPECT_NO_THROW(Trainer(smallConfig("sim", 2, {}), nullptr).dryRun(written));
  EXPECT_ERROR_NAMES(Trainer(smallConfig("sim", 2, {"optimizer.lr=0.5"}), nullptr).dryRun(written),
                     "different configuration");
}

// A simulated world that cannot fit in memory is refused before allocating, naming the keys
// (8192 simulated ResNet-20 ranks need about 26 GiB: on a 24 GiB machine they used to train
// for minutes and end in a bare std::bad_alloc). 2^20 ranks fit no machine (3.4 TB).
TEST_F(HardeningTrainerTest, AWorldThatCannotFitInMemoryIsRefusedByName) {
  const std::string message = errorOf([&] {
    Trainer(smallConfig("sim", 1 << 20, {"data.train_samples=0", "data.batch_size=4"}), nullptr).dryRun();
  });
  EXPECT_NE(message.find("comm.world_size"), std::string::npos) << message;
  EXPECT_NE(message.find("GiB"), std::string::npos) << message;
}

}  // namespace
}  // namespace aps::train
