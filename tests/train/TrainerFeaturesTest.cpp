// The trainer features users expect from PyTorch Lightning and torchvision's references, end
// to end on simulated ranks: gradient clipping, label smoothing, a validation split, keeping
// the best weights, early stopping, evaluating a checkpoint without training, resuming on
// another world size and gradient accumulation.
#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"
#include "framework/train/Checkpoint.h"
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
using testing::trainLosses;

class TrainerFeatures : public ::testing::Test {
 protected:
  void SetUp() override {
    APS_REQUIRE_FASHION_MNIST();
    dir_ = fs::temp_directory_path() /
           ("aps-features-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The records of a metrics file of type `type`.
  static std::vector<nlohmann::json> records(const std::string& file, const std::string& type) {
    std::vector<nlohmann::json> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.at("type") == type) out.push_back(std::move(j));
    }
    return out;
  }

  // 2 simulated ranks x batch 8 over 128 images: 8 steps per epoch.
  TrainConfig config(std::vector<std::string> extra) const {
    std::vector<std::string> keys{"data.train_samples=128", "data.test_samples=64"};
    keys.insert(keys.end(), extra.begin(), extra.end());
    return smallConfig("sim", 2, keys);
  }

  fs::path dir_;
};

TEST_F(TrainerFeatures, ClipGradNormBoundsTheUpdateAndLogsTheNorm) {
  const std::string plainMetrics = path("plain.jsonl"), clippedMetrics = path("clipped.jsonl");
  Trainer plain(config({"max_steps=4", "logging.metrics_file=" + plainMetrics}), nullptr);
  plain.run();
  // A bound far above any gradient's norm changes nothing, bit for bit.
  Trainer loose(config({"max_steps=4", "optimizer.clip_grad_norm=1e9"}), nullptr);
  loose.run();
  EXPECT_TRUE(bitIdentical(plain.modelState(), loose.modelState()));
  // A tight bound changes the weights, and every train record carries the norm before clipping.
  Trainer clipped(config({"max_steps=4", "optimizer.clip_grad_norm=0.01", "logging.metrics_file=" + clippedMetrics}),
                  nullptr);
  clipped.run();
  EXPECT_FALSE(bitIdentical(plain.modelState(), clipped.modelState()));
  const auto train = records(clippedMetrics, "train");
  ASSERT_FALSE(train.empty());
  for (const auto& r : train) {
    ASSERT_TRUE(r.contains("grad_norm")) << r.dump();
    EXPECT_GT(r["grad_norm"].get<double>(), 0.01) << "an unclipped ResNet-20 gradient is far above 0.01";
  }
  EXPECT_FALSE(records(plainMetrics, "train").front().contains("grad_norm"));
  // The value clamp alone changes the weights too.
  Trainer clamped(config({"max_steps=4", "optimizer.clip_grad_value=1e-5"}), nullptr);
  clamped.run();
  EXPECT_FALSE(bitIdentical(plain.modelState(), clamped.modelState()));
}

TEST_F(TrainerFeatures, LabelSmoothingChangesTheTrainingLossOnly) {
  const std::string plainMetrics = path("plain.jsonl"), smoothMetrics = path("smooth.jsonl");
  Trainer plain(config({"max_steps=2", "logging.metrics_file=" + plainMetrics}), nullptr);
  plain.run();
  Trainer smooth(config({"max_steps=2", "loss.label_smoothing=0.2", "logging.metrics_file=" + smoothMetrics}),
                 nullptr);
  smooth.run();
  // Same initial weights and batches: step 1's loss differs by the smoothing alone.
  EXPECT_NE(trainLosses(plainMetrics).front(), trainLosses(smoothMetrics).front());
  EXPECT_FALSE(bitIdentical(plain.modelState(), smooth.modelState()));
  EXPECT_THROW(config({"loss.label_smoothing=1.5"}), Error);
}

TEST_F(TrainerFeatures, ValidationSamplesAreHeldOutAndEvaluatedDuringTraining) {
  const std::string metrics = path("m.jsonl");
  // 128 training samples, 32 held out: 96 train, 6 steps per epoch over 2 ranks x 8.
  Trainer trainer(config({"data.validation_samples=32", "epochs=2", "eval.interval_epochs=1",
                          "logging.metrics_file=" + metrics}),
                  nullptr);
  const TrainSummary summary = trainer.run();
  EXPECT_EQ(summary.steps, 12);
  const auto evals = records(metrics, "eval");
  ASSERT_EQ(evals.size(), 1u);  // after epoch 1; the end is the final test evaluation
  EXPECT_EQ(evals[0].value("split", ""), "validation");
  EXPECT_EQ(evals[0]["step"], 6);
  const auto finals = records(metrics, "final");
  ASSERT_EQ(finals.size(), 1u);
  EXPECT_FALSE(finals[0].contains("split"));
  // Nothing left to train on is refused, naming the key.
  EXPECT_THROW(Trainer(config({"data.validation_samples=128"}), nullptr).run(), Error);
}

TEST_F(TrainerFeatures, EarlyStoppingStopsAndKeepBestKeepsTheBestWeights) {
  const std::string metrics = path("m.jsonl"), checkpoints = path("ck");
  // No evaluation can improve top-1 by more than 1 (all of it): the first sets the best, the
  // second is stale, and patience 1 stops after it, at epoch 2 of 6.
  Trainer trainer(config({"epochs=6", "eval.interval_epochs=1", "eval.early_stopping=1", "eval.min_delta=1",
                          "checkpoint.keep_best=true", "checkpoint.dir=" + checkpoints,
                          "logging.metrics_file=" + metrics}),
                  nullptr);
  const TrainSummary summary = trainer.run();
  EXPECT_TRUE(summary.earlyStopped);
  EXPECT_EQ(summary.steps, 16);
  const auto best = records(metrics, "best");
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0]["step"], 8);
  EXPECT_EQ(best[0]["metric"], "top1");
  const auto finals = records(metrics, "final");
  ASSERT_EQ(finals.size(), 1u);
  EXPECT_TRUE(finals[0]["early_stopped"].get<bool>());
  EXPECT_EQ(finals[0]["best"]["step"], 8);
  // best.safetensors holds epoch 1's weights: the step-8 checkpoint's model, not the final one.
  const NamedTensors bestWeights = io::loadSafetensors(checkpoints + "/best.safetensors").tensors;
  const NamedTensors atStep8 = loadCheckpoint(checkpointPath(checkpoints, 8)).section("model");
  EXPECT_TRUE(bitIdentical(bestWeights, atStep8));
  EXPECT_FALSE(bitIdentical(bestWeights, io::loadSafetensors(checkpoints + "/final.safetensors").tensors));
  // A resume of the stopped run trains nothing more.
  Trainer again(config({"epochs=6", "eval.interval_epochs=1", "eval.early_stopping=1", "eval.min_delta=1",
                        "checkpoint.keep_best=true", "checkpoint.dir=" + checkpoints}),
                nullptr);
  EXPECT_EQ(again.run(checkpointPath(checkpoints, 16)).steps, 16);
}

TEST_F(TrainerFeatures, WatchingNeedsEvaluationsAndAMetricTheModelReports) {
  EXPECT_THROW(config({"checkpoint.keep_best=true", "eval.interval_epochs=0"}), Error);
  EXPECT_THROW(config({"eval.early_stopping=2", "eval.interval_epochs=0"}), Error);
  EXPECT_THROW(Trainer(config({"eval.early_stopping=2", "eval.monitor=miou"}), nullptr).run(), Error);
}

TEST_F(TrainerFeatures, EvalOnlyReportsTheCheckpointsMetricsWithoutTraining) {
  const std::string checkpoints = path("ck"), metrics = path("eval.jsonl");
  Trainer trainer(config({"max_steps=4", "checkpoint.dir=" + checkpoints}), nullptr);
  const TrainSummary trained = trainer.run();
  Trainer evaluator(config({"max_steps=4", "checkpoint.dir=" + checkpoints, "logging.metrics_file=" + metrics}),
                    nullptr);
  const TrainSummary evaluated = evaluator.evaluateOnly(checkpointPath(checkpoints, 4));
  EXPECT_EQ(evaluated.top1, trained.top1);
  EXPECT_EQ(evaluated.loss, trained.loss);
  EXPECT_EQ(evaluated.steps, 4);
  EXPECT_TRUE(bitIdentical(evaluator.modelState(), trainer.modelState()));
  const auto finals = records(metrics, "final");
  ASSERT_EQ(finals.size(), 1u);
  EXPECT_TRUE(finals[0]["eval_only"].get<bool>());
  EXPECT_TRUE(records(metrics, "train").empty());
  // Without weights to evaluate it refuses.
  EXPECT_THROW(Trainer(config({}), nullptr).evaluateOnly(""), Error);
}

TEST_F(TrainerFeatures, ResumesOnAnotherWorldSizeOnlyWhenAsked) {
  const std::string checkpoints = path("ck"), metrics = path("m.jsonl");
  // 4 ranks x batch 8 over 128 images: 4 steps per epoch, 12 steps; the step-6 checkpoint is
  // epoch 1, 2 steps (64 samples) into it.
  const std::vector<std::string> common{"epochs=3", "checkpoint.dir=" + checkpoints, "checkpoint.interval_steps=2",
                                        "checkpoint.keep=10"};
  auto withWorld = [&](int world, std::vector<std::string> extra) {
    std::vector<std::string> keys{"data.train_samples=128", "data.test_samples=64"};
    keys.insert(keys.end(), common.begin(), common.end());
    keys.insert(keys.end(), extra.begin(), extra.end());
    return smallConfig("sim", world, keys);
  };
  Trainer(withWorld(4, {}), nullptr).run();
  const std::string at6 = checkpointPath(checkpoints, 6);
  // By default a checkpoint of 4 ranks does not resume on 2, and the error says how it could.
  try {
    Trainer(withWorld(2, {}), nullptr).run(at6);
    FAIL() << "resumed on another world size without checkpoint.world_change";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("written by 4 ranks x batch 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint.world_change"), std::string::npos) << e.what();
  }
  // keep_global_batch: 2 ranks x 16, the same 4 steps per epoch, so the run resumes at step 6.
  Trainer same(withWorld(2, {"checkpoint.world_change=keep_global_batch", "logging.metrics_file=" + metrics}),
               nullptr);
  EXPECT_EQ(same.run(at6).steps, 12);
  const auto train = records(metrics, "train");
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(train.front()["step"], 7);
  // keep_rank_batch: 2 ranks x 8 = global 16, 8 steps per epoch; 64 samples into epoch 1 is its
  // step 4 (global step 12 of 24), and the LR is halved with the global batch.
  const std::string metrics2 = path("m2.jsonl");
  Trainer rank(withWorld(2, {"checkpoint.world_change=keep_rank_batch", "logging.metrics_file=" + metrics2}),
               nullptr);
  EXPECT_EQ(rank.run(at6).steps, 24);
  const auto train2 = records(metrics2, "train");
  ASSERT_FALSE(train2.empty());
  EXPECT_EQ(train2.front()["step"], 13);
  EXPECT_DOUBLE_EQ(train2.front()["lr"].get<double>(), 0.025);
}

TEST_F(TrainerFeatures, GradientAccumulationTrainsAsTheLargerBatch) {
  // 2 ranks x 2 micro-batches of 8 against 2 ranks x batch 16: the same 4 steps per epoch over
  // 128 images, the same samples in each step. The BN-free convnet, so that nothing but the
  // grouping of the fp32 sums over the batch differs (with K = 2 the per-sample loss gradients
  // are the same bits: scale / 2 is exact).
  const std::vector<std::string> common{"model.name=convnet", "epochs=2", "schedule.name=constant"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return config(extra);
  };
  const std::string accumulatedMetrics = path("acc.jsonl"), largeMetrics = path("large.jsonl");
  Trainer accumulated(with({"optimizer.accumulation_steps=2", "logging.metrics_file=" + accumulatedMetrics}), nullptr);
  Trainer large(with({"data.batch_size=16", "logging.metrics_file=" + largeMetrics}), nullptr);
  Trainer small(with({}), nullptr);
  EXPECT_EQ(accumulated.run().steps, 8);
  EXPECT_EQ(large.run().steps, 8);
  EXPECT_EQ(small.run().steps, 16);
  const double difference = maxRelativeDifference(large.modelState(), accumulated.modelState());
  EXPECT_LT(difference, 1e-4) << "accumulating 2 x 8 is not the step of batch 16";
  EXPECT_GT(maxRelativeDifference(small.modelState(), accumulated.modelState()), 100 * std::max(difference, 1e-7))
      << "accumulation changed nothing against batch 8";
  // The logged loss is the mean over the micro-batches: the large batch's loss to fp32 rounding,
  // and each train record counts the step's 2 x 2 x 8 images.
  const auto a = records(accumulatedMetrics, "train"), l = records(largeMetrics, "train");
  ASSERT_EQ(a.size(), l.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), l[i]["loss"].get<double>(), 1e-4 * l[i]["loss"].get<double>()) << i;
    EXPECT_EQ(a[i]["step"], l[i]["step"]);
  }
}

TEST_F(TrainerFeatures, GradientAccumulationWithBatchNormAndLowPrecisionLearns) {
  // ResNet-20 (batch norm over each micro-batch) with E4M3 + APS on the wire: accumulating is
  // deterministic and learns.
  const std::string metrics = path("m.jsonl");
  auto run = [&](const std::string& file) {
    Trainer t(config({"epochs=3", "optimizer.accumulation_steps=2", "precision.format=e4m3", "precision.scaling=aps",
                      "logging.metrics_file=" + file}),
              nullptr);
    t.run();
    return t.modelState();
  };
  const NamedTensors first = run(metrics);
  EXPECT_TRUE(bitIdentical(first, run(path("again.jsonl"))));
  const auto losses = trainLosses(metrics);
  ASSERT_GE(losses.size(), 6u);
  EXPECT_LT(losses.back(), losses.front());
}

TEST_F(TrainerFeatures, MlpTrainsAndItsInputWidthMustMatchTheData) {
  // Dettmers' 784-1200-1200-10 network on Fashion-MNIST learns; a first width other than the
  // dataset's 1 x 28 x 28 is refused before training, naming the key and both numbers.
  const std::string metrics = path("m.jsonl");
  Trainer mlp(config({"model.name=mlp", "epochs=2", "data.augment=false", "logging.metrics_file=" + metrics}), nullptr);
  mlp.run();
  const auto losses = trainLosses(metrics);
  ASSERT_GE(losses.size(), 8u);
  EXPECT_LT(losses.back(), losses.front());
  Trainer wrong(config({"model.name=mlp", "model.widths=[100, 50]"}), nullptr);
  try {
    wrong.run();
    FAIL() << "an mlp of 100 input features trained on 784-feature images";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.widths[0] = 100 but dataset 'fashion_mnist' has 784 features per "
                                         "sample (1 x 28 x 28)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace aps::train
