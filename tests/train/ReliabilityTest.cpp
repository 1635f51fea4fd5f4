// Faults a long run meets, injected on purpose: NaN / inf gradients (skipped consistently on
// every simulated rank, or stopping the run under precision.nonfinite = stop, and never
// reaching the weights), a full disk while writing a checkpoint (reported naming the file,
// the previous checkpoint intact) and an unreadable data file (reported naming it).
#include "data/ImageDecode.h"
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/Function.h"
#include "framework/autograd/GradMode.h"
#include "framework/nn/Linear.h"
#include "framework/nn/ReLU.h"
#include "framework/nn/Sequential.h"
#include "framework/ops/Loss.h"
#include "framework/optim/Sgd.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/FaultInjection.h"
#include "framework/train/Trainer.h"
#include "models/ModelRegistry.h"
#include "precision/DynamicLossScaler.h"
#include "tests/common/ErrorMessage.h"
#include "tests/train/ChildProcess.h"
#include "tests/train/TrainerTestSupport.h"

#include "tests/common/Datasets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace aps::train {
namespace {

namespace fs = std::filesystem;
using testing::ChildProcess;
using testing::readText;
using testing::smallConfig;
using testsupport::errorOf;

// Sets APS_FAULT_INJECTION for the lifetime of the guard (the trainer reads it when built).
class InjectedFaults {
 public:
  explicit InjectedFaults(const std::string& spec) { ::setenv(FaultInjection::kEnvironmentVariable, spec.c_str(), 1); }
  ~InjectedFaults() { ::unsetenv(FaultInjection::kEnvironmentVariable); }
};

bool allFinite(const NamedTensors& state) {
  for (const auto& [name, tensor] : state) {
    if (tensor.dtype() != DType::Float32) continue;
    for (float v : tensor.toFloatVector()) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

// Random NaN / inf faults: `count` of them at steps in [0, steps), on random ranks and layers.
struct Poison {
  std::string spec;
  std::set<int64_t> steps;
};
// The poisoning tests train the small BN-free convnet: fast enough for the sanitizer tree.
constexpr const char* kModel = "convnet";

Poison randomPoison(std::mt19937& rng, int count, int64_t steps, int world) {
  const auto params = static_cast<int64_t>(models::createModel(kModel, {10, 1, 1})->namedParameters().size());
  Poison p;
  for (int i = 0; i < count; ++i) {
    const int64_t step = std::uniform_int_distribution<int64_t>(0, steps - 1)(rng);
    const int rank = std::uniform_int_distribution<int>(0, world - 1)(rng);
    const int64_t param = std::uniform_int_distribution<int64_t>(0, params - 1)(rng);
    p.spec += fmt::format("{}@rank={},step={},param={};", rng() % 2 ? "nan" : "inf", rank, step, param);
    p.steps.insert(step);
  }
  return p;
}

// The steps that were skipped, from the metrics file (one "train" line per step).
std::set<int64_t> skippedSteps(const std::string& metricsFile) {
  std::set<int64_t> skipped;
  std::ifstream in(metricsFile);
  int64_t before = 0, step = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") != "train") continue;
    const int64_t now = j.at("skipped_steps").get<int64_t>();
    if (now != before) skipped.insert(step);
    before = now;
    ++step;
  }
  return skipped;
}

TEST(FaultInjection, ParsesFaultsAndRejectsMalformedOnes) {
  const auto f = FaultInjection::parse("nan@rank=1,step=3,param=5;throw@rank=0,step=9;");
  ASSERT_EQ(f.faults().size(), 2u);
  EXPECT_EQ(f.faults()[0].kind, FaultInjection::Kind::NaN);
  EXPECT_EQ(f.faults()[0].rank, 1);
  EXPECT_EQ(f.faults()[0].step, 3);
  EXPECT_EQ(f.faults()[0].param, 5);
  EXPECT_EQ(f.faults()[1].kind, FaultInjection::Kind::Throw);
  EXPECT_TRUE(FaultInjection::parse("").empty());
  EXPECT_NE(errorOf([] { FaultInjection::parse("boom@rank=1,step=2"); }).find("unknown kind 'boom'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { FaultInjection::parse("nan@rank=1"); }).find("needs rank= and step="), std::string::npos);
  EXPECT_NE(errorOf([] { FaultInjection::parse("nan@rank=-1,step=2"); }).find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NO_THROW(FaultInjection::parse("throw@rank=1,step=2").beforeStep(0, 1, 2));  // another rank
  EXPECT_NE(
      errorOf([] { FaultInjection::parse("throw@rank=1,step=2").beforeStep(0, 2, 2); }).find("rank 1 throws at step 2"),
      std::string::npos);
}

// Every poisoned step, and only those, is skipped (the agreement is part of the all-reduce,
// so all simulated ranks decide alike), and the weights stay finite: a NaN or inf that
// reached them once would stay in every later step's weights.
void expectPoisonSkipped(const std::vector<std::string>& precision) {
  APS_REQUIRE_FASHION_MNIST();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int kWorld = 4;
  constexpr int64_t kSteps = 10;
  const Poison poison = randomPoison(rng, 4, kSteps, kWorld);
  SCOPED_TRACE(poison.spec);
  const fs::path metrics = fs::temp_directory_path() / ("aps-poison-" + std::to_string(::getpid()) + ".jsonl");
  auto extra = precision;
  extra.insert(extra.end(), {"model.name=" + std::string(kModel), "max_steps=" + std::to_string(kSteps),
                             "logging.metrics_file=" + metrics.string()});
  InjectedFaults faults(poison.spec);
  Trainer trainer(smallConfig("sim", kWorld, extra), nullptr);
  const TrainSummary summary = trainer.run();
  EXPECT_EQ(summary.skippedSteps, static_cast<int64_t>(poison.steps.size()));
  EXPECT_EQ(skippedSteps(metrics.string()), poison.steps);
  EXPECT_TRUE(allFinite(trainer.modelState()));
  fs::remove(metrics);
}

TEST(PoisonedGradients, SimSkipsEveryPoisonedStepWithFp32) { expectPoisonSkipped({"precision.format=fp32"}); }

TEST(PoisonedGradients, SimSkipsEveryPoisonedStepWithE4m3AndAps) {
  expectPoisonSkipped({"precision.format=e4m3", "precision.scaling=aps"});
}

// With 16-bit compute the trainer's dynamic loss scaler takes part: each poisoned step, and
// only those, is skipped and halves the loss scale the metrics report for that step.
TEST(PoisonedGradients, TrainerWithFp16LossScalingSkipsAndHalvesTheScale) {
  APS_REQUIRE_FASHION_MNIST();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t kSteps = 10;
  const Poison poison = randomPoison(rng, 3, kSteps, 4);
  SCOPED_TRACE(poison.spec);
  const fs::path metrics = fs::temp_directory_path() / ("aps-poison-fp16-" + std::to_string(::getpid()) + ".jsonl");
  InjectedFaults faults(poison.spec);
  Trainer trainer(smallConfig("sim", 4,
                              {"model.name=" + std::string(kModel), "max_steps=" + std::to_string(kSteps),
                               "precision.compute=fp16_mixed", "precision.loss_scale=1024",
                               "logging.metrics_file=" + metrics.string()}),
                  nullptr);
  const TrainSummary summary = trainer.run();
  EXPECT_EQ(summary.skippedSteps, static_cast<int64_t>(poison.steps.size()));
  EXPECT_EQ(skippedSteps(metrics.string()), poison.steps);
  std::ifstream in(metrics);
  double expected = 1024;
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") != "train") continue;
    if (poison.steps.count(step)) expected /= 2;
    EXPECT_EQ(j.at("loss_scale").get<double>(), expected) << "step " << step;
    ++step;
  }
  EXPECT_EQ(step, kSteps);
  EXPECT_TRUE(allFinite(trainer.modelState()));
  fs::remove(metrics);
}

TEST(PoisonedGradients, SimStopsUnderPolicyStopNamingTheStep) {
  APS_REQUIRE_FASHION_MNIST();
  InjectedFaults faults("inf@rank=3,step=2,param=3");
  Trainer trainer(smallConfig("sim", 4,
                              {"model.name=" + std::string(kModel), "max_steps=6", "precision.nonfinite=stop",
                               "precision.format=e5m2"}),
                  nullptr);
  const std::string message = errorOf([&] { trainer.run(); });
  EXPECT_NE(message.find("step 2: a gradient holds NaN or inf"), std::string::npos) << message;
  EXPECT_TRUE(allFinite(trainer.modelState()));
}

// The scaler's side of the policy on a bare training loop as well: with fp16 mixed
// precision and the same injected faults (through the same gradient-ready hook the trainer
// uses), each poisoned step, and only those, is skipped and halves the loss scale, and the
// weights are finite after every step.
TEST(PoisonedGradients, LossScalerSkipsPoisonedStepsAndLowersTheScale) {
  namespace ag = autograd;
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng init(3);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(16, 32, init));
  model->add(std::make_shared<nn::ReLU>());
  model->add(std::make_shared<nn::Linear>(32, 4, init));
  NamedTensors params = model->namedParameters();
  constexpr int64_t kSteps = 40;
  std::string spec;
  std::set<int64_t> poisoned;
  for (int i = 0; i < 8; ++i) {
    const int64_t step = std::uniform_int_distribution<int64_t>(0, kSteps - 1)(rng);
    const auto param = std::uniform_int_distribution<size_t>(0, params.size() - 1)(rng);
    spec += fmt::format("{}@rank=0,step={},param={};", rng() % 2 ? "nan" : "inf", step, param);
    poisoned.insert(step);
  }
  SCOPED_TRACE(spec);
  const FaultInjection faults = FaultInjection::parse(spec);
  int64_t step = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    ag::addGradReadyHook(params[i].tensor,
                         [&, i](Tensor& leaf) { faults.poisonGradient(0, step, static_cast<int64_t>(i), leaf); });
  }
  optim::Sgd sgd(params, {.lr = 0.05, .momentum = 0.9});
  precision::DynamicLossScaler scaler({.initialScale = 1024.0, .growthInterval = 1000});
  const ag::ComputePrecision precision = ag::ComputePrecision::parse("fp16_mixed");
  Rng data(5);
  const Tensor x = Tensor::randn({8, 16}, data);
  const Tensor y = Tensor::fromVector(std::span<const int64_t>(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}), {8});
  for (step = 0; step < kSteps; ++step) {
    sgd.zeroGrad();
    Tensor loss;
    {
      ag::ComputePrecisionGuard guard(precision);
      loss = ops::crossEntropy(model->forward(x), y);
    }
    ag::backward(loss, scaler.rootGradient());
    const float scaleBefore = scaler.scale();
    const bool finite = scaler.unscaleGradients(params, precision.parameterFormat());
    const bool applied = scaler.update(finite);
    EXPECT_EQ(applied, !poisoned.contains(step)) << "step " << step;
    EXPECT_EQ(scaler.scale(), applied ? scaleBefore : scaleBefore / 2) << "step " << step;
    if (applied) {
      ag::NoGradGuard noGrad;
      sgd.step();
    }
    ASSERT_TRUE(allFinite(model->stateDict())) << "non-finite weights after step " << step;
  }
  EXPECT_EQ(scaler.state().skippedSteps, static_cast<int64_t>(poisoned.size()));
}

Checkpoint smallCheckpoint(int64_t step, int64_t floats) {
  Checkpoint c;
  c.modelName = "resnet20";
  c.globalStep = step;
  std::vector<float> values(static_cast<size_t>(floats));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f + static_cast<float>(step);
  c.tensors.push_back({"model.w", Tensor::fromVector(std::span<const float>(values), {floats})});
  return c;
}

// A checkpoint write that hits the file-size limit (EFBIG, as a full disk gives ENOSPC) in a
// child process: reported naming the file, and the previous checkpoint stays whole.
TEST(FullDisk, CheckpointWriteFailureNamesTheFileAndKeepsThePrevious) {
  const fs::path dir = fs::temp_directory_path() / ("aps-fulldisk-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = checkpointPath(dir.string(), 5);
  saveCheckpoint(path, smallCheckpoint(5, 1000));
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string message = errorOf([&] { saveCheckpoint(path, smallCheckpoint(9, 100'000)); });
    (void)!::write(pipeFds[1], message.data(), message.size());
    ::_exit(message.empty() ? 0 : 1);
  }
  ::close(pipeFds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipeFds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, static_cast<size_t>(n));
  ::close(pipeFds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << message;
  EXPECT_NE(message.find("cannot write checkpoint '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  const Checkpoint kept = loadCheckpoint(path);
  EXPECT_EQ(kept.globalStep, 5);
  std::string diff;
  EXPECT_TRUE(testing::bitIdentical(kept.tensors, smallCheckpoint(5, 1000).tensors, &diff)) << diff;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "temporary file left behind";
  fs::remove_all(dir);
}

// The same through aps_train: a resumed run whose next checkpoint does not fit exits non-zero
// naming the checkpoint, and the checkpoint it resumed from is still readable.
TEST(FullDisk, TrainingStopsNamingTheCheckpointAndKeepsThePrevious) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path dir = fs::temp_directory_path() / ("aps-fulldisk-train-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string base = (dir / "tiny.yaml").string();
  std::ofstream(base) << "model: {name: resnet20, num_classes: 10, in_channels: 1}\n"
                         "data: {dataset: fashion_mnist, batch_size: 8, workers: 1, train_samples: 16, "
                         "test_samples: 16}\n"
                         "comm: {backend: sim, world_size: 1}\nthreads: 1\nlogging: {level: warn, progress: false}\n"
                         "checkpoint: {dir: "
                      << dir.string() << "}\n";
  {
    ChildProcess first({APS_TRAIN_BINARY, "--config", base, "--set", "epochs=1"}, (dir / "first.log").string(), {});
    first.wait();
    ASSERT_EQ(first.exitCode(), 0) << readText((dir / "first.log").string());
  }
  const auto checkpoints = listCheckpoints(dir.string());
  ASSERT_EQ(checkpoints.size(), 1u);
  const std::string log = (dir / "second.log").string();
  ChildProcess second({APS_TRAIN_BINARY, "--config", base, "--set", "epochs=2", "--resume", checkpoints[0]}, log,
                      {{}, 256 * 1024});  // a ResNet-20 checkpoint is about 2 MB
  second.wait();
  const std::string out = readText(log);
  EXPECT_EQ(second.exitCode(), 1) << out;
  EXPECT_NE(out.find("cannot write checkpoint '" + checkpointPath(dir.string(), 4) + "'"), std::string::npos) << out;
  EXPECT_NE(out.find("File too large"), std::string::npos) << out;
  EXPECT_NO_THROW(loadCheckpoint(checkpoints[0]));
  EXPECT_EQ(listCheckpoints(dir.string()), checkpoints);
  fs::remove_all(dir);
}

// APS at many ranks with a 4-bit format: its headroom for the sum takes the format's whole
// range, every gradient value is flushed and nothing is learned (docs/RESULTS.md, 64 ranks).
// aps_train says so at start-up, naming the format and what to do; at 8 ranks it does not.
TEST(Warnings, ApsHeadroomThatFlushesEveryGradientIsReported) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path dir = fs::temp_directory_path() / ("aps-headroom-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << "model: {name: convnet, num_classes: 10, in_channels: 1}\n"
                           "data: {dataset: fashion_mnist, batch_size: 1, workers: 1, train_samples: 64, "
                           "test_samples: 16}\n"
                           "precision: {format: e3m0, scaling: aps}\nepochs: 1\nthreads: 1\n"
                           "logging: {progress: false}\n";
  // Hierarchical APS (docs/ALGORITHMS.md, Hierarchical APS) in groups of 8 pays 3 + 3 bits at 64
  // ranks, which E3M0 affords; groups of 1 leave one level of 64 ranks, which it does not.
  struct Case {
    int world, groupSize;
    bool warns;
  };
  for (const Case c : {Case{64, 0, true}, Case{8, 0, false}, Case{64, 8, false}, Case{64, 1, true}}) {
    const std::string log =
        (dir / ("world" + std::to_string(c.world) + "g" + std::to_string(c.groupSize) + ".log")).string();
    std::vector<std::string> args{APS_TRAIN_BINARY, "--config", config, "--set", "comm.backend=sim"};
    args.insert(args.end(), {"--set", "comm.world_size=" + std::to_string(c.world)});
    if (c.groupSize > 0) {
      args.insert(args.end(),
                  {"--set", "comm.algorithm=hierarchical", "--set", "comm.group_size=" + std::to_string(c.groupSize)});
    }
    ChildProcess run(args, log, {});
    run.wait();
    const std::string out = readText(log);
    ASSERT_EQ(run.exitCode(), 0) << out;
    const bool warned = out.find("e3m0") != std::string::npos &&
                        out.find("every gradient value will be flushed to zero") != std::string::npos;
    EXPECT_EQ(warned, c.warns) << "world " << c.world << " group " << c.groupSize << ": " << out;
  }
  fs::remove_all(dir);
}

// A data file that cannot be read (a folder where the file should be; a truncated file) is
// reported naming it before training starts.
TEST(UnreadableData, FolderOrTruncatedFileInPlaceOfDataIsNamed) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path dir = fs::temp_directory_path() / ("aps-baddata-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
    fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / name, dir / name);
  }
  const fs::path images = dir / "train-images-idx3-ubyte";
  fs::create_directories(images);
  const auto config = smallConfig("sim", 1, {"data.path=" + dir.string()});
  const std::string folder = errorOf([&] { Trainer(config, nullptr).dryRun(); });
  EXPECT_NE(folder.find("found a directory: " + images.string()), std::string::npos) << folder;

  fs::remove(images);
  {
    std::ifstream full(fs::path("/usr/share/datasets/fashion-mnist") / "train-images-idx3-ubyte.gz", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(full)), {});
    std::ofstream(dir / "train-images-idx3-ubyte.gz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string truncated = errorOf([&] { Trainer(config, nullptr).dryRun(); });
  EXPECT_NE(truncated.find((dir / "train-images-idx3-ubyte.gz").string()), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  fs::remove_all(dir);
}

// Found by fuzzing (tests/fuzz/corpus/image/regression-*): 178 bytes that OpenCV's DICOM
// reader turned into a multi-gigabyte allocation, a PNG header promising 10^10 pixels, one
// promising 16384 x 16384 16-bit pixels (under the first limit, but 1.5 GiB to decode), and a
// JPEG whose 40000 x 40000 frame header hides behind bytes libjpeg skips. All are refused
// before decoding, naming the file.
TEST(UnreadableData, ImagesOtherThanJpegOrPngOrTooLargeAreRefused) {
  const fs::path corpus = fs::path(APS_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "image";
  const fs::path dir = fs::temp_directory_path() / ("aps-badimage-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"regression-dicom-oom", "regression-png-huge-header", "regression-png-16k-header",
                           "regression-jpeg-junk-before-frame"}) {
    std::ifstream in(corpus / name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(bytes.empty()) << name;
    std::ofstream(dir / name, std::ios::binary) << bytes.substr(1);  // the harness's mode byte
  }
  data::LabelMap labels;
  const std::string dicom = (dir / "regression-dicom-oom").string();
  EXPECT_NE(errorOf([&] {
              data::decodeLabelFile(dicom, data::LabelEncoding::kIndex, 19, labels);
            }).find(dicom + ": not a JPEG or PNG file"),
            std::string::npos);
  const std::string huge = (dir / "regression-png-huge-header").string();
  data::Image image;
  EXPECT_NE(errorOf([&] { data::decodeImageFile(huge, image); }).find(huge + ": image size 100000x100000 exceeds"),
            std::string::npos);
  const std::string png16k = (dir / "regression-png-16k-header").string();
  EXPECT_NE(errorOf([&] { data::decodeImageFile(png16k, image); }).find(png16k + ": image size 16384x16384 exceeds"),
            std::string::npos);
  const std::string jpeg = (dir / "regression-jpeg-junk-before-frame").string();
  EXPECT_NE(errorOf([&] { data::decodeImageFile(jpeg, image); }).find(jpeg + ": image size 40000x40000 exceeds"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aps::train
