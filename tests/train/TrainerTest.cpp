// The trainer end to end on simulated ranks: it learns, resumes bit-identically, reports its
// metrics and refuses inputs it cannot train on.
#include "framework/core/Error.h"
#include "framework/tensor/HalfFloat.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Trainer.h"
#include "precision/HybridPolicy.h"
#include "tests/train/TrainerTestSupport.h"

#include "tests/common/Datasets.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace aps::train {
namespace {

using testing::bitIdentical;
using testing::smallConfig;
using testing::trainLosses;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    APS_REQUIRE_FASHION_MNIST();
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

// comm.sim_workers: simulated ranks computed side by side on copies of the model, one thread
// each, give the bits of one rank at a time on all threads: the same weights, batch-norm
// statistics and logged losses. 5 ranks, so the copies take uneven shares (3 and 2, or 2, 2
// and 1); with stochastic rounding, error feedback's per-rank residuals and 16-bit compute.
TEST_F(TrainerTest, SimulatedRanksSideBySideComputeTheSameBitsAsOneAtATime) {
  for (const std::vector<std::string>& precision :
       {std::vector<std::string>{"precision.format=e4m3", "precision.scaling=aps", "precision.rounding=stochastic",
                                 "precision.error_feedback=true"},
        std::vector<std::string>{"precision.format=e5m2", "precision.compute=fp16_mixed"}}) {
    NamedTensors alone;
    std::vector<double> aloneLosses;
    for (const char* workers : {"1", "2", "3"}) {
      auto extra = precision;
      for (const std::string& kv :
           {std::string("data.batch_size=4"), std::string("threads=2"), "comm.sim_workers=" + std::string(workers),
            "logging.metrics_file=" + path(std::string("m") + workers + ".jsonl")})
        extra.push_back(kv);
      Trainer trainer(smallConfig("sim", 5, extra), nullptr);
      const TrainSummary summary = trainer.run();
      EXPECT_EQ(summary.steps, 256 / (5 * 4));
      const auto losses = trainLosses(path(std::string("m") + workers + ".jsonl"));
      ASSERT_EQ(static_cast<int64_t>(losses.size()), summary.steps);
      if (std::string(workers) == "1") {
        alone = trainer.modelState();
        aloneLosses = losses;
        continue;
      }
      std::string diff;
      EXPECT_TRUE(bitIdentical(alone, trainer.modelState(), &diff))
          << precision[0] << ", " << workers << " workers: first difference " << diff;
      EXPECT_EQ(losses, aloneLosses) << precision[0] << ", " << workers << " workers";
    }
  }
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
  auto again = common;
  again.push_back("logging.metrics_file=" + path("resumed.jsonl"));
  Trainer resumed(smallConfig("sim", 2, again), nullptr);
  resumed.run(checkpoints.back());
  // The resumed run starts at the checkpoint's step (a restore that restored nothing would
  // train all 32 steps from scratch and still end with the same bits): one train record per
  // step (logging.interval = 1), the first after step 22.
  std::vector<int64_t> steps;
  {
    std::ifstream in(path("resumed.jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.at("type") == "train") steps.push_back(j.at("step").get<int64_t>());
    }
  }
  ASSERT_EQ(steps.size(), 32u - 21u);
  EXPECT_EQ(steps.front(), 22);
  EXPECT_EQ(steps.back(), 32);
  std::string diff;
  EXPECT_TRUE(bitIdentical(straight, resumed.modelState(), &diff)) << "first difference: " << diff;
}

// A checkpoint written before every part saved its state through one interface (Stateful)
// still resumes: its run (tests/fixtures/train/precision_state.yaml) continued from step 4
// ends with the weights of one that never stopped. Its precision section holds every kind of
// precision state, so each part reads the names it wrote then.
TEST_F(TrainerTest, ResumesACheckpointWrittenBeforeTheStateInterface) {
  const std::string fixtures = std::string(APS_SOURCE_DIR) + "/tests/fixtures/train/";
  const std::string old = fixtures + "precision_state-0000000004.safetensors";
  const Checkpoint c = loadCheckpoint(old);
  EXPECT_EQ(c.globalStep, 4);
  std::vector<std::string> names;
  for (const auto& entry : c.section("precision")) names.push_back(entry.name);
  for (const char* name : {"statistics", "statistics_out", "loss_scale", "widenings", "autoscale.e4m3",
                           "residual_sizes", "residual.0", "residual.1"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  const auto config = [&](const std::string& dir) {
    return loadConfig(fixtures + "precision_state.yaml", {"checkpoint.dir=" + path(dir)});
  };
  NamedTensors straight;
  {
    Trainer trainer(config("straight"), nullptr);
    trainer.run();
    straight = trainer.modelState();
  }
  // The straight run's checkpoint at step 4 holds what the old one does, under the same names.
  const Checkpoint now = loadCheckpoint(checkpointPath(path("straight"), 4));
  ASSERT_EQ(now.tensors.size(), c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    EXPECT_EQ(now.tensors[i].name, c.tensors[i].name);
    std::string diff;
    EXPECT_TRUE(bitIdentical({now.tensors[i]}, {c.tensors[i]}, &diff)) << c.tensors[i].name << ": " << diff;
  }
  Trainer resumed(config("resumed"), nullptr);
  resumed.run(old);
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
  EXPECT_ERROR_NAMES(missing.run(path("nope.safetensors")), path("nope.safetensors"));
}

TEST_F(TrainerTest, DeviceCudaIsRefusedAtStartUpNeverIgnored) {
  // Without a GPU (or a CUDA build) the error says which is missing; with one it says the
  // trainer does not run on it yet. Either way nothing trains on the cpu by mistake.
  const std::string error = testsupport::errorOf([&] {
    Trainer trainer(smallConfig("sim", 2, {"device=cuda", "checkpoint.dir=" + path("ckpt")}), nullptr);
    trainer.run();
  });
  EXPECT_NE(error.find("device = 'cuda'"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(path("ckpt"))) << "a refused run wrote checkpoints";
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
  EXPECT_ERROR_NAMES(trainer.run(), "model.in_channels = 3");
  EXPECT_ERROR_NAMES(Trainer(smallConfig("sim", 2, {"model.name=resnet21"}), nullptr), "resnet21");
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
  nlohmann::json j;
  while (std::getline(in, line) && (j = nlohmann::json::parse(line)).at("type") != "train") {
  }
  bool sawFc = false;
  for (const auto& layer : j.at("layers")) {
    if (layer.at("name") == "fc.weight") {
      sawFc = true;
      EXPECT_EQ(layer.at("flushed").get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(sawFc);
}

// Error-feedback residuals, FP8-LM's mu and hybrid precision's widened formats and statistics
// windows are checkpointed: stopping mid-epoch and resuming gives the same bits.
TEST_F(TrainerTest, PrecisionStateResumesBitIdentically) {
  const std::vector<std::vector<std::string>> variants{
      {"precision.format=e3m0", "precision.scaling=aps", "precision.error_feedback=true"},
      {"precision.format=e4m3", "precision.scaling=autoscale"},
      {"precision.format=e3m0", "precision.hybrid_auto=true", "precision.stats_window=3",
       "precision.hybrid_underflow=0.2"}};
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    auto common = variants[v];
    common.insert(common.end(), {"model.name=convnet", "epochs=2"});
    NamedTensors straight;
    {
      Trainer trainer(smallConfig("sim", 2, common), nullptr);
      trainer.run();
      straight = trainer.modelState();
    }
    auto first = common;
    first.push_back("max_steps=21");
    first.push_back("checkpoint.dir=" + path("ckpt" + std::to_string(v)));
    {
      Trainer trainer(smallConfig("sim", 2, first), nullptr);
      trainer.run();
    }
    const auto checkpoints = listCheckpoints(path("ckpt" + std::to_string(v)));
    ASSERT_FALSE(checkpoints.empty());
    Trainer resumed(smallConfig("sim", 2, common), nullptr);
    resumed.run(checkpoints.back());
    std::string diff;
    EXPECT_TRUE(bitIdentical(straight, resumed.modelState(), &diff)) << "first difference: " << diff;
  }
}

// precision.compute: the 16-bit modes train (FP16-throughout and mixed precision), pure modes
// keep every weight a 16-bit value, and the loss scaler's state resumes bit-identically.
TEST_F(TrainerTest, SixteenBitComputeModesLearn) {
  for (const std::string mode : {"fp16_mixed", "bf16_pure"}) {
    SCOPED_TRACE(mode);
    auto config = smallConfig(
        "sim", 2,
        {"epochs=3", "data.train_samples=1024", "data.batch_size=16", "optimizer.lr=0.1", "precision.format=e4m3",
         "precision.scaling=aps", "precision.compute=" + mode, "logging.metrics_file=" + path(mode + ".jsonl")});
    Trainer trainer(config, nullptr);
    const TrainSummary summary = trainer.run();
    const auto losses = trainLosses(path(mode + ".jsonl"));
    ASSERT_EQ(static_cast<int64_t>(losses.size()), summary.steps);
    double first = 0, last = 0;
    for (int i = 0; i < 8; ++i) {
      first += losses[static_cast<size_t>(i)] / 8;
      last += losses[losses.size() - 1 - static_cast<size_t>(i)] / 8;
    }
    EXPECT_LT(last, 0.6 * first);
    EXPECT_GT(summary.top1, 0.3);
    if (mode == "bf16_pure") {
      for (const auto& p : trainer.modelState()) {
        if (p.name.find("running_") != std::string::npos || p.tensor.dtype() != DType::Float32) continue;
        const Tensor t = p.tensor.contiguous();
        for (int64_t i = 0; i < t.numel(); ++i) {
          const float v = t.data<float>()[i];
          ASSERT_EQ(bfloat16BitsToFloat(floatToBFloat16Bits(v)), v) << p.name << "[" << i << "] is not a bf16 value";
        }
      }
    }
  }
}

TEST_F(TrainerTest, PureFp16WithStochasticUpdatesResumesBitIdentically) {
  const std::vector<std::string> common{"model.name=convnet",          "epochs=2",
                                        "precision.compute=fp16_pure", "precision.stochastic_update=true",
                                        "precision.loss_scale=1e9",    "precision.format=e5m2",
                                        "precision.scaling=aps"};
  NamedTensors straight;
  {
    Trainer trainer(smallConfig("sim", 2, common), nullptr);
    const auto summary = trainer.run();
    EXPECT_GT(summary.skippedSteps, 0);  // a scale of 1e9 overflows fp16 at first: halved until it fits
    straight = trainer.modelState();
  }
  auto first = common;
  first.insert(first.end(), {"max_steps=21", "checkpoint.dir=" + path("ckpt")});
  {
    Trainer trainer(smallConfig("sim", 2, first), nullptr);
    trainer.run();
  }
  Trainer resumed(smallConfig("sim", 2, common), nullptr);
  resumed.run(listCheckpoints(path("ckpt")).back());
  std::string diff;
  EXPECT_TRUE(bitIdentical(straight, resumed.modelState(), &diff)) << "first difference: " << diff;
}

// Every JSON line of a metrics file.
std::vector<nlohmann::json> metricLines(const std::string& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST_F(TrainerTest, HybridAutoWidensLayersThatUnderflow) {
  // E3M0 without scaling flushes most small gradients: the automatic rule moves those layers
  // up the ladder (e3m0 -> e4m3 -> e5m2 ...), says so in the metrics, and training goes on.
  Trainer trainer(smallConfig("sim", 2,
                              {"model.name=convnet", "precision.format=e3m0", "precision.hybrid_auto=true",
                               "precision.stats_window=2", "max_steps=12", "logging.metrics_file=" + path("m.jsonl")}),
                  nullptr);
  EXPECT_EQ(trainer.run().steps, 12);
  const auto lines = metricLines(path("m.jsonl"));
  ASSERT_FALSE(lines.empty());
  ASSERT_EQ(lines[0].at("type"), "formats");  // every layer's format at start-up
  EXPECT_EQ(lines[0].at("layers").size(), 6u);
  for (const auto& layer : lines[0].at("layers")) EXPECT_EQ(layer.at("format"), "e3m0");
  int widened = 0;
  std::map<std::string, std::string> current;  // each layer's format as the records go
  for (const auto& layer : lines[0].at("layers")) current[layer.at("name")] = layer.at("format");
  for (const auto& j : lines) {
    if (j.at("type") != "format") continue;
    ++widened;
    const std::string from = j.at("from"), to = j.at("to");
    EXPECT_EQ(from, current[j.at("name")]);
    EXPECT_EQ(to, precision::HybridPolicy::widen(precision::FloatFormat::preset(from)).name);  // one rung up
    current[j.at("name")] = to;
    EXPECT_GE(j.at("step").get<int64_t>(), 2);  // after a full window of statistics
  }
  EXPECT_GT(widened, 0);
}

// 4-bit gradients at 64 ranks: APS must reserve log2(64) = 6 binades for the sum, more than
// E3M0's range, so every scaled value flushes and the reduced gradient is zero (the probe's
// relative error is exactly 1); block scaling gives every sender's block of 32 its own scale
// and keeps the gradient (small relative error), and the model trains.
TEST_F(TrainerTest, E3m0At64RanksTrainsWithBlockScalingWhereApsFlushesEverything) {
  std::map<std::string, double> relError, lossDrop;
  for (const std::string scaling : {"aps", "block"}) {
    const std::string file = path(scaling + ".jsonl");
    Trainer trainer(smallConfig("sim", 64,
                                {"model.name=convnet", "precision.format=e3m0", "precision.scaling=" + scaling,
                                 "data.batch_size=2", "data.train_samples=4096", "optimizer.lr=0.2",
                                 "precision.probe_interval=8", "max_steps=32", "logging.metrics_file=" + file}),
                    nullptr);
    trainer.run();
    const auto losses = trainLosses(file);
    ASSERT_EQ(losses.size(), 32u);
    double first = 0, last = 0;
    for (size_t i = 0; i < 6; ++i) {
      first += losses[i] / 6;
      last += losses[losses.size() - 1 - i] / 6;
    }
    lossDrop[scaling] = first - last;
    for (const auto& j : metricLines(file)) {
      if (j.at("type") == "final") relError[scaling] = j.at("probe").at("median_rel_error").get<double>();
    }
  }
  EXPECT_EQ(relError.at("aps"), 1.0);  // nothing arrives
  EXPECT_LT(relError.at("block"), 0.5);
  EXPECT_GT(lossDrop.at("block"), 0.2);           // learns (2.30 -> 1.91 when written)
  EXPECT_LT(std::fabs(lossDrop.at("aps")), 0.1);  // does not (2.32 -> 2.31: batch noise)
}

// A probed step whose sum overflows (FP8-LM's first step at 128 ranks: mu starts at 1, the
// coherent sums of the first gradient overflow E4M3, the step is skipped and mu halves) is
// counted, not averaged in: the run's medians stay those of the finite probes.
TEST_F(TrainerTest, FidelityProbeCountsOverflowedStepsApart) {
  const std::string file = path("fp8lm.jsonl");
  Trainer trainer(smallConfig("sim", 128,
                              {"model.name=convnet", "data.batch_size=4", "data.train_samples=1024",
                               "precision.format=e4m3", "precision.scaling=autoscale", "precision.probe_interval=1",
                               "max_steps=2", "logging.metrics_file=" + file}),
                  nullptr);
  trainer.run();
  int probesNonFinite = 0;
  for (const auto& j : metricLines(file)) {
    if (j.at("type") == "probe") {
      bool finite = true;
      for (const auto& layer : j.at("layers")) finite &= layer.at("rel_error").is_number();
      probesNonFinite += finite ? 0 : 1;
    }
    if (j.at("type") != "final") continue;
    const auto& probe = j.at("probe");
    EXPECT_EQ(probe.at("steps"), 2);
    EXPECT_EQ(probe.at("nonfinite_steps"), 1);
    ASSERT_TRUE(probe.at("median_rel_error").is_number()) << probe.dump();
    EXPECT_GT(probe.at("median_rel_error").get<double>(), 0.0);
    EXPECT_LT(probe.at("median_rel_error").get<double>(), 0.2);
    EXPECT_EQ(j.at("skipped_steps"), 1);
  }
  EXPECT_EQ(probesNonFinite, 1);
}

// The fidelity probe (precision.probe_interval: 2) writes a "probe" record on steps 0, 2, 4, ...
// and on no other; fp32 over `native` is its own shadow (exact figures), e4m3 is not; the
// final record carries the run's medians.
TEST_F(TrainerTest, FidelityProbeRecordsEveryKSteps) {
  for (const std::string format : {"fp32", "e4m3"}) {
    const std::string file = path(format + ".jsonl");
    // fp32 over native is exact; e4m3 over the default two_shot (native ignores the wire format).
    std::vector<std::string> extra{"model.name=convnet", "precision.format=" + format, "precision.probe_interval=2",
                                   "max_steps=7", "logging.metrics_file=" + file};
    if (format == "fp32") extra.push_back("comm.algorithm=native");
    Trainer trainer(smallConfig("sim", 2, extra), nullptr);
    trainer.run();
    std::vector<int64_t> steps;
    bool final = false;
    for (const auto& j : metricLines(file)) {
      if (j.at("type") == "final") {
        final = true;
        const auto& probe = j.at("probe");
        EXPECT_EQ(probe.at("steps"), 4);
        if (format == "fp32") {
          EXPECT_EQ(probe.at("median_rel_error").get<double>(), 0.0);
          EXPECT_EQ(probe.at("median_cosine").get<double>(), 1.0);
        } else {
          EXPECT_GT(probe.at("median_rel_error").get<double>(), 0.0);
          EXPECT_LT(probe.at("median_rel_error").get<double>(), 0.5);
          EXPECT_GT(probe.at("median_cosine").get<double>(), 0.9);
        }
      }
      if (j.at("type") != "probe") continue;
      steps.push_back(j.at("step").get<int64_t>());
      ASSERT_EQ(j.at("layers").size(), 6u);  // every parameter of the convnet
      for (const auto& layer : j.at("layers")) {
        EXPECT_EQ(layer.at("format"), format);
        if (format == "fp32") {
          EXPECT_EQ(layer.at("rel_error").get<double>(), 0.0) << layer.dump();
          EXPECT_EQ(layer.at("cosine").get<double>(), 1.0) << layer.dump();
          EXPECT_EQ(layer.at("in_flushed").get<double>(), 0.0);
        } else {
          EXPECT_GT(layer.at("rel_error").get<double>(), 0.0) << layer.dump();
          EXPECT_GE(layer.at("in_flushed").get<double>(), 0.0);
          EXPECT_GE(layer.at("out_flushed").get<double>(), 0.0);
        }
      }
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 2, 4, 6})) << format;
    EXPECT_TRUE(final);
  }
}

// The probe fires on the trainer's steps 0, K, 2K, ... also after hybrid precision widened a
// layer and rebuilt the reducer (which then continues at the next step): each probe record is
// followed by the train record of the same step (logging.interval 1 counts from 1).
TEST_F(TrainerTest, FidelityProbeKeepsItsStepsAcrossWidening) {
  Trainer trainer(smallConfig("sim", 2,
                              {"model.name=convnet", "precision.format=e3m0", "precision.hybrid_auto=true",
                               "precision.stats_window=2", "precision.probe_interval=3", "max_steps=12",
                               "logging.metrics_file=" + path("m.jsonl")}),
                  nullptr);
  trainer.run();
  const auto lines = metricLines(path("m.jsonl"));
  int probes = 0, widened = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    widened += lines[i].at("type") == "format";
    if (lines[i].at("type") != "probe") continue;
    ++probes;
    const int64_t step = lines[i].at("step").get<int64_t>();
    EXPECT_EQ(step % 3, 0);
    size_t next = i + 1;
    while (next < lines.size() && lines[next].at("type") != "train") ++next;
    ASSERT_LT(next, lines.size());
    EXPECT_EQ(lines[next].at("step").get<int64_t>(), step + 1) << "probe of step " << step;
  }
  EXPECT_EQ(probes, 4);  // steps 0, 3, 6, 9
  EXPECT_GT(widened, 0);
}

// Without precision.probe_interval nothing is probed.
TEST_F(TrainerTest, NoProbeRecordsByDefault) {
  Trainer trainer(
      smallConfig("sim", 2, {"model.name=convnet", "max_steps=3", "logging.metrics_file=" + path("m.jsonl")}), nullptr);
  trainer.run();
  for (const auto& j : metricLines(path("m.jsonl"))) {
    EXPECT_NE(j.at("type"), "probe");
    if (j.at("type") == "final") {
      EXPECT_FALSE(j.contains("probe"));
    }
  }
}

TEST_F(TrainerTest, AutoscaleReportsMuPerFormat) {
  Trainer trainer(smallConfig("sim", 2,
                              {"model.name=convnet", "precision.format=e4m3", "precision.scaling=autoscale",
                               "max_steps=8", "logging.metrics_file=" + path("m.jsonl")}),
                  nullptr);
  trainer.run();
  int seen = 0;
  for (const auto& j : metricLines(path("m.jsonl"))) {
    if (j.at("type") != "train") continue;
    const double mu = j.at("autoscale").at("e4m3").get<double>();
    // Small gradients never reach e4m3's max: mu grows by 2^(1/1000) per step.
    EXPECT_NEAR(mu, std::exp2((j.at("step").get<double>()) / 1000.0), 1e-6);
    ++seen;
  }
  EXPECT_EQ(seen, 8);
}

// Data parallelism is exact in exact arithmetic for a model without batch norm: 4 ranks x 8
// with fp32 `native` sync take the same steps as one process with batch 32 on the same
// samples, up to float rounding of the different summation order.
TEST_F(TrainerTest, NativeFp32MatchesOneProcessOnTheCombinedBatch) {
  const std::vector<std::string> common{"model.name=convnet", "max_steps=6", "comm.algorithm=native",
                                        "precision.format=fp32", "optimizer.lr=0.2"};
  Trainer parallel(smallConfig("sim", 4, common), nullptr);
  parallel.run();
  auto single = common;
  single.push_back("data.batch_size=32");
  Trainer one(smallConfig("sim", 1, single), nullptr);
  one.run();
  const NamedTensors a = parallel.modelState(), b = one.modelState();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor x = a[i].tensor.contiguous(), y = b[i].tensor.contiguous();
    double diff = 0, norm = 0;
    for (int64_t k = 0; k < x.numel(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(x.data<float>()[k] - y.data<float>()[k])));
      norm = std::max(norm, static_cast<double>(std::fabs(y.data<float>()[k])));
    }
    worst = std::max(worst, diff / norm);
  }
  EXPECT_LT(worst, 1e-5);
  // And training moved the weights (the comparison is not vacuous).
  Trainer untrained(smallConfig("sim", 1, {"model.name=convnet"}), nullptr);
  EXPECT_FALSE(bitIdentical(untrained.modelState(), b));
}

}  // namespace
}  // namespace aps::train
