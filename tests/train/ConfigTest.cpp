#include "framework/core/Error.h"
#include "framework/train/Config.h"
#include "framework/train/ConfigSchema.h"
#include "models/ModelRegistry.h"
#include "precision/CodecSpec.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace {

using aps::train::parseConfig;

// Expects parsing to fail with a message containing every fragment.
void expectError(const std::string& yaml, std::initializer_list<std::string> fragments,
                 const std::vector<std::string>& overrides = {}) {
  try {
    parseConfig(yaml, "exp.yaml", overrides);
    FAIL() << "expected an error for:\n" << yaml;
  } catch (const aps::Error& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(Config, AnEmptyMapGivesEveryDefault) {
  const auto c = parseConfig("{}", "empty.yaml");
  EXPECT_EQ(c.model.name, "resnet20");
  EXPECT_EQ(c.data.batchSize, 128);
  EXPECT_EQ(c.comm.algorithm, aps::train::CommAlgorithm::TwoShot);
  EXPECT_TRUE(c.comm.overlap);
  EXPECT_EQ(aps::precision::makeCodec(c.precision.format.spec)->name(), "fp32");
  EXPECT_DOUBLE_EQ(c.optimizer.weightDecay, 1e-4);
}

TEST(Config, ReadsEverySection) {
  const auto c = parseConfig(R"(
seed: 7
model: {name: resnet50, num_classes: 1000, in_channels: 3}
optimizer: {name: lars, lr: 3.2}
schedule: {name: multistep, milestones: [30, 60, 80], warmup_epochs: 5}
precision:
  format: {exponent_bits: 4, mantissa_bits: 3}
  scaling: aps
  hybrid:
    - {pattern: "fc.*", format: fp16}
comm: {backend: sim, world_size: 64, algorithm: ring}
)",
                             "exp.yaml");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.model.numClasses, 1000);
  EXPECT_EQ(c.optimizer.name, "lars");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3.2);
  EXPECT_EQ(c.schedule.milestones, (std::vector<int64_t>{30, 60, 80}));
  EXPECT_EQ(c.precision.format.spec.format.exponentBits, 4);
  EXPECT_EQ(c.precision.scaling, aps::precision::ScalingMode::Aps);
  ASSERT_EQ(c.precision.hybrid.size(), 1u);
  EXPECT_EQ(c.precision.hybrid[0].pattern, "fc.*");
  EXPECT_EQ(aps::precision::makeCodec(c.precision.hybrid[0].format.spec)->name(), "fp16");
  EXPECT_EQ(c.comm.worldSize, 64);
  EXPECT_EQ(c.comm.algorithm, aps::train::CommAlgorithm::Ring);
}

// Values are checked as keys are: file and line, every valid name, a "did you mean", and all
// the errors of a config in one report.
TEST(Config, UnknownValuesNameFileLineEveryChoiceAndSuggest) {
  expectError("seed: 1\nprecision:\n  format: e4m4\n",
              {"exp.yaml:3", "'precision.format'", "format 'e4m4' is unknown; did you mean 'e4m3'?", "mxfp4",
               "dettmers_dynamic", "e4m3_ieee"});
  expectError("precision: {hybrid: [{pattern: 'fc.*', format: mxfp5}]}\n",
              {"exp.yaml:1", "'precision.hybrid'", "format 'mxfp5' is unknown; did you mean 'mxfp4'?"});
  expectError("precision: {format: {exponent_bits: 4, mantisa_bits: 3}}\n",
              {"exp.yaml:1", "'precision.format'", "unknown key 'mantisa_bits'"});
  expectError("model:\n  name: resnet21\n", {"exp.yaml:2", "'model.name' must be one of", "resnet20", "resnet50",
                                                "did you mean 'resnet20'?"});
  expectError("optimizer: {name: adam}\n", {"exp.yaml:1", "did you mean 'adamw'?"});
  // Three bad values, one report.
  expectError("model: {name: resnet21}\noptimizer: {lr: -1}\nprecision: {format: e9m9}\n",
              {"3 errors in the config:", "exp.yaml:1: 'model.name'", "exp.yaml:2: 'optimizer.lr' = -1 is out of range",
               "exp.yaml:3: 'precision.format': format 'e9m9' is unknown"});
  // Valid spellings of every kind still parse.
  for (const char* format : {"mxfp4", "e4m3:stochastic", "e3m0/block32", "dettmers_linear/block256", "float16",
                             "{exponent_bits: 3, mantissa_bits: 4, bias: 7}"}) {
    EXPECT_NO_THROW(parseConfig(std::string("precision: {format: ") + format + "}\n", "exp.yaml")) << format;
  }
}

TEST(Config, UnknownKeyNamesFileLineAndSuggests) {
  expectError("seed: 1\noptimizer:\n  lrr: 0.1\n",
              {"exp.yaml:3", "unknown key 'optimizer.lrr'", "did you mean 'optimizer.lr'"});
  expectError("modle: {name: resnet20}\n", {"exp.yaml:1", "'modle'", "did you mean 'model'"});
  expectError("lr: 0.1\n", {"unknown key 'lr'", "did you mean 'optimizer.lr'"});
  // Found by fuzzing (tests/fuzz/corpus/config/regression-non-scalar-key.yaml): a list as a
  // key threw yaml-cpp's bad conversion instead of aps::Error.
  expectError("? [1, 2]\n: 3\n", {"exp.yaml:1", "a key under 'the top level' is a list, not a name"});
  expectError("data: {{a: 1}: 2}\n", {"a key under 'data' is a map"});
}

TEST(Config, WrongTypesAreReportedWithTheKey) {
  expectError("data: {batch_size: many}\n", {"exp.yaml:1", "'data.batch_size' must be a number", "'many'"});
  expectError("epochs: 2.5\n", {"'epochs' must be an integer"});
  expectError("epochs: 089\n", {"'epochs' must be an integer", "'089'"});  // fuzzing found it
  expectError("comm: {overlap: maybe}\n", {"'comm.overlap' must be true or false"});
  expectError("schedule: {milestones: 30}\n", {"'schedule.milestones' must be a list of integers"});
  expectError("model: resnet20\n", {"'model' is a section and must be a map"});
  expectError("precision: {hybrid: [{pattern: x}]}\n", {"'precision.hybrid' rule must be a map"});
}

TEST(Config, OutOfRangeAndUnknownChoices) {
  expectError("data: {batch_size: 0}\n", {"'data.batch_size' = 0 is out of range"});
  expectError("optimizer: {momentum: 1.5}\n", {"'optimizer.momentum' = 1.5 is out of range [0, 1]"});
  expectError("comm: {algorithm: tree}\n",
              {"'comm.algorithm' must be one of ring, two_shot, allgather, native, hierarchical, got 'tree'"});
  expectError("schedule: {milestones: [60, 30]}\n", {"'schedule.milestones' must increase"});
  expectError("comm: {world_size: 4}\n", {"applies to the sim backend only"});
}

TEST(Config, HierarchicalNeedsAGroupSizeThatDividesTheWorld) {
  const auto c =
      parseConfig("comm: {backend: sim, world_size: 8, algorithm: hierarchical, group_size: 4}\n", "exp.yaml");
  EXPECT_EQ(c.comm.algorithm, aps::train::CommAlgorithm::Hierarchical);
  EXPECT_EQ(c.comm.groupSize, 4);
  expectError("comm: {backend: sim, world_size: 8, algorithm: hierarchical}\n",
              {"exp.yaml", "hierarchical needs 'comm.group_size'"});
  expectError("comm: {backend: sim, world_size: 8, algorithm: hierarchical, group_size: 3}\n",
              {"'comm.group_size' = 3 must divide 'comm.world_size' = 8"});
  expectError("comm: {backend: sim, world_size: 8, algorithm: hierarchical, group_size: 16}\n",
              {"'comm.group_size' = 16 must divide 'comm.world_size' = 8"});
  expectError("comm: {backend: sim, world_size: 8, group_size: 2}\n",
              {"'comm.group_size' = 2 applies to comm.algorithm: hierarchical only"});
  const std::string hier = "comm: {backend: sim, world_size: 8, algorithm: hierarchical, group_size: 2}\n";
  expectError(hier + "precision: {format: e3m0, error_feedback: true}\n",
              {"precision.error_feedback is not available with comm.algorithm: hierarchical"});
  expectError(hier + "precision: {format: e4m3, scaling: autoscale}\n",
              {"precision.scaling = 'fp8lm'", "not available with comm.algorithm: hierarchical"});
  expectError(hier + "precision: {format: e4m3, hybrid_auto: true}\n",
              {"precision.hybrid_auto is not available with comm.algorithm: hierarchical"});
  EXPECT_EQ(parseConfig(hier + "precision: {format: e3m0, scaling: aps, probe_interval: 10}\n", "exp.yaml")
                .precision.probeInterval,
            10);
}

TEST(Config, CanvasKeysBelongToTheSegmentationDataset) {
  const auto c = parseConfig("data: {dataset: fashion_mnist_seg, canvas: 40, max_items: 2}\n", "seg.yaml");
  EXPECT_EQ(c.data.canvas, 40);
  EXPECT_EQ(c.data.maxItems, 2);
  expectError("data: {dataset: cifar10, canvas: 40}\n", {"exp.yaml", "'data.canvas' = 40", "'cifar10'"});
  expectError("data: {max_items: 3}\n", {"'data.max_items' = 3", "fashion_mnist_seg"});
  expectError("data: {dataset: fashion_mnist_seg, canvas: 20}\n", {"exp.yaml:1", "data.canvas"});
}

TEST(Config, DeviceNamesAreCheckedWhenParsed) {
  EXPECT_EQ(parseConfig("device: cuda:1\n", "exp.yaml").device, "cuda:1");
  expectError("device: gpu\n", {"exp.yaml: 'device'", "unknown device 'gpu' (expected cpu, cuda or cuda:N)"});
  expectError("device: cuda:x\n", {"'device'", "'cuda:x'"});
  expectError("comm: {backend: nccl}\n", {"comm.backend = 'nccl'", "needs device: cuda"});
}

// Formats, scaling, compute and the algorithm are typed when the config loads; a float format
// that names no rounding takes precision.rounding, one that names its own keeps it.
TEST(Config, FormatsAndModesAreParsedWhenLoaded) {
  using aps::precision::RoundingMode;
  const auto c = parseConfig(R"(
precision:
  format: e4m3
  rounding: stochastic
  scaling: autoscale
  compute: bf16_mixed
  hybrid:
    - {pattern: "fc.*", format: "e5m2:toward_zero"}
    - {pattern: "conv1.*", format: e3m0}
    - {pattern: "bn*", format: mxfp4}
parallel: {activation_format: e4m3}
comm: {algorithm: allgather}
)",
                             "typed.yaml");
  EXPECT_EQ(c.precision.format.spec.rounding, RoundingMode::Stochastic);
  EXPECT_EQ(c.precision.hybrid[0].format.spec.rounding, RoundingMode::TowardZero);
  EXPECT_EQ(c.precision.hybrid[1].format.spec.rounding, RoundingMode::Stochastic);
  EXPECT_EQ(c.precision.hybrid[2].format.spec.kind, aps::precision::CodecSpec::Kind::BlockScaled);
  EXPECT_EQ(c.precision.hybrid[2].format.spec.rounding, RoundingMode::NearestEven);
  EXPECT_EQ(c.parallel.activationFormat.spec.rounding, RoundingMode::NearestEven);  // its own: nearest
  EXPECT_EQ(c.precision.scaling, aps::precision::ScalingMode::Fp8Lm);                // the documented alias
  EXPECT_EQ(c.precision.compute.mode(), aps::autograd::ComputePrecision::Mode::Bf16Mixed);
  EXPECT_EQ(c.comm.algorithm, aps::train::CommAlgorithm::Allgather);
  // The choices the schema offers are the names tables' (and the one documented alias).
  expectError("precision: {scaling: auto}\n",
              {"exp.yaml:1", "'precision.scaling' must be one of none, aps, global, fp8lm, block, autoscale"});
  expectError("precision: {compute: fp8}\n",
              {"exp.yaml:1", "must be one of fp32, fp16_mixed, fp16_pure, bf16_mixed, bf16_pure"});
}

TEST(Config, InvalidYamlNamesTheLine) { expectError("a: [1, 2\nb: 3\n", {"exp.yaml:", "invalid YAML"}); }

TEST(Config, OverridesApplyAndAreValidated) {
  const auto c = parseConfig("optimizer: {lr: 0.1}\n", "exp.yaml",
                             {"optimizer.lr=0.4", "comm.backend=sim", "comm.world_size=8", "precision.format=e4m3"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.4);
  EXPECT_EQ(c.comm.worldSize, 8);
  EXPECT_EQ(aps::precision::makeCodec(c.precision.format.spec)->name(), "e4m3");
  expectError("{}", {"--set optimizer.lrr=1", "did you mean 'optimizer.lr'"}, {"optimizer.lrr=1"});
  expectError("{}", {"expected key.path=value"}, {"optimizer.lr"});
  expectError("{}", {"'optimizer.lr' must be a number"}, {"optimizer.lr=fast"});
}

TEST(Config, PrintedConfigParsesBackToTheSameHash) {
  const auto c = parseConfig("seed: 3\ncomm: {backend: sim, world_size: 4}\n", "exp.yaml");
  const auto again = parseConfig(aps::train::configToYaml(c), "printed.yaml");
  EXPECT_EQ(aps::train::configHash(c), aps::train::configHash(again));
  const auto other = parseConfig("seed: 4\ncomm: {backend: sim, world_size: 4}\n", "exp.yaml");
  EXPECT_NE(aps::train::configHash(c), aps::train::configHash(other));
}

TEST(Config, MissingFileIsNamed) {
  try {
    aps::train::loadConfig("/nonexistent/exp.yaml");
    FAIL();
  } catch (const aps::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/exp.yaml"), std::string::npos);
  }
}

}  // namespace

namespace {

// Issue #21: values are never silently replaced by defaults, and every message points at the
// real origin of the value.
TEST(ConfigHardening, AnEmptyOrNonMappingConfigIsAnError) {
  expectError("", {"exp.yaml", "the config is empty"});
  expectError("# only a comment\n", {"exp.yaml", "the config is empty"});
  expectError("~\n", {"exp.yaml", "the config is empty"});
  expectError("- a\n- b\n", {"exp.yaml", "must be a map", "a list"});
  expectError("just text\n", {"exp.yaml", "must be a map", "'just text'"});
}

TEST(ConfigHardening, AWrongValueIsReportedAtItsOwnLine) {
  expectError("seed: 1\nmodel:\n  name: resnet20\noptimizer:\n  lr: fast\n", {"exp.yaml:5:", "optimizer.lr", "'fast'"});
  expectError("seed: 1\n\n\nschedule: {milestones: [1, x]}\n", {"exp.yaml:4:", "schedule.milestones"});
  expectError("epochs: 1\ncomm:\n  algorithm: fastest\n", {"exp.yaml:3:", "comm.algorithm"});
}

TEST(ConfigHardening, ABadOverrideIsBlamedOnTheOverride) {
  expectError("seed: 1\n", {"--set optimizer.lr=fast", "optimizer.lr"}, {"optimizer.lr=fast"});
  try {
    parseConfig("seed: 1\n", "exp.yaml", {"comm.algorithm=fastest"});
    FAIL();
  } catch (const aps::Error& e) {
    EXPECT_EQ(std::string(e.what()).find("exp.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--set comm.algorithm=fastest"), std::string::npos) << e.what();
  }
}

TEST(ConfigHardening, EmptyOrNullValuesAreErrorsNotDefaults) {
  expectError("seed: 1\n", {"--set optimizer.lr=", "has no value"}, {"optimizer.lr="});
  expectError("seed: 1\n", {"--set model.name=~", "has no value"}, {"model.name=~"});
  expectError("seed: 1\n", {"has no value"}, {"model.name=null"});
  expectError("optimizer:\n  lr:\n", {"exp.yaml:2:", "'optimizer.lr' has no value", "default (0.1)"});
  expectError("model: {name: ~}\n", {"exp.yaml:1:", "'model.name' has no value"});
  // An empty string is still a value.
  EXPECT_EQ(parseConfig("seed: 1\n", "exp.yaml", {"checkpoint.dir=''"}).checkpoint.dir, "");
}

TEST(ConfigHardening, DuplicateKeysAreErrors) {
  expectError("optimizer: {lr: 0.1}\nseed: 1\noptimizer: {lr: 0.5}\n",
              {"exp.yaml:3:", "'optimizer' is given twice", "first at line 1"});
  expectError("optimizer:\n  lr: 0.1\n  lr: 0.2\n", {"exp.yaml:3:", "'optimizer.lr' is given twice"});
}

TEST(ConfigHardening, LongValuesAreCutInMessages) {
  const std::string huge(1 << 20, 'x');
  for (const auto& [yaml, overrides] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{{"optimizer: {name: " + huge + "}\n", {}},
                                                                     {"seed: 1\n", {"optimizer.name=" + huge}},
                                                                     {"seed: 1\n", {huge + "=1"}},
                                                                     {"seed: " + huge + "\n", {}}}) {
    try {
      parseConfig(yaml, "exp.yaml", overrides);
      FAIL();
    } catch (const aps::Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << std::string(e.what()).substr(0, 400);
      EXPECT_NE(std::string(e.what()).find("1048576 characters"), std::string::npos)
          << std::string(e.what()).substr(0, 400);
    }
  }
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("aps-config-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigFileTest, ADirectoryAnEmptyFileOrUtf16IsRefusedByName) {
  EXPECT_ERROR_NAMES(aps::train::loadConfig(dir_.string()), "is a directory");
  EXPECT_ERROR_NAMES(aps::train::loadConfig(write("empty.yaml", "")), "empty.yaml: the config is empty");
  // "seed: 1" in UTF-16 little-endian with a byte-order mark, and without one.
  std::string utf16 = "\xff\xfe";
  for (char ch : std::string("seed: 1\n")) utf16 += std::string{ch, '\0'};
  EXPECT_ERROR_NAMES(aps::train::loadConfig(write("utf16.yaml", utf16)), "is UTF-16 encoded");
  EXPECT_ERROR_NAMES(aps::train::loadConfig(write("utf16-nobom.yaml", utf16.substr(2))), "NUL byte");
  // A UTF-8 byte-order mark is fine.
  EXPECT_EQ(aps::train::loadConfig(write("bom.yaml", "\xef\xbb\xbfseed: 3\n")).seed, 3u);
}

TEST(Config, EveryShippedConfigValidates) {
  int count = 0;  // configs/*.yaml and the bases they share (configs/base/)
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(APS_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const auto config = aps::train::loadConfig(entry.path().string());
    // The name the schema cannot check: the model (the wire formats are parsed as the config loads).
    EXPECT_NO_THROW(aps::models::modelInfo(config.model.name));
    ++count;
  }
  EXPECT_GE(count, 14);
}

// Configs compose: `base: FILE` (or a list, merged left to right) under the including file's
// folder, bases of bases, then the file's own keys, then --set.
class ConfigBase : public ConfigFileTest {
 protected:
  aps::train::TrainConfig load(const std::string& name, const std::vector<std::string>& overrides = {}) {
    return aps::train::loadConfig((dir_ / name).string(), overrides);
  }
  std::string errorLoading(const std::string& name) {
    return aps::testsupport::errorOf([&] { load(name); });
  }
};

TEST_F(ConfigBase, AChildOverridesANestedKeyAndKeepsTheBaseSiblings) {
  write("base.yaml", "seed: 5\noptimizer: {name: nesterov, lr: 0.1, momentum: 0.8}\ncomm: {backend: sim}\n");
  write("child.yaml", "# a comment\nbase: base.yaml\noptimizer:\n  lr: 0.4\ncomm: {world_size: 2}\n");
  const auto c = load("child.yaml");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.4);
  EXPECT_EQ(c.optimizer.name, "nesterov");
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.8);
  EXPECT_EQ(c.seed, 5u);
  EXPECT_EQ(c.comm.backend, "sim");
  EXPECT_EQ(c.comm.worldSize, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.weightDecay, 1e-4);  // neither file: the default
  // `base` is no config key: the resolved config (--print-config) does not hold it.
  EXPECT_FALSE(YAML::Load(aps::train::configToYaml(c))["base"]) << aps::train::configToYaml(c);
  EXPECT_EQ(c.sourceFile, (dir_ / "child.yaml").string());
}

TEST_F(ConfigBase, ABaseOfABaseIsFoundFromEachIncludingFile) {
  std::filesystem::create_directories(dir_ / "parts");
  write("grand.yaml", "seed: 1\nepochs: 7\ndata: {batch_size: 16, workers: 3}\n");
  write("parts/mid.yaml", "base: ../grand.yaml\nseed: 2\ndata: {workers: 1}\n");
  write("child.yaml", "base: parts/mid.yaml\nseed: 3\n");
  const auto c = load("child.yaml");
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.epochs, 7);
  EXPECT_EQ(c.data.batchSize, 16);
  EXPECT_EQ(c.data.workers, 1);
}

TEST_F(ConfigBase, AListOfBasesMergesLeftToRight) {
  write("common.yaml", "logging: {interval: 7}\n");
  write("a.yaml", "base: common.yaml\nepochs: 2\noptimizer: {lr: 0.1, momentum: 0.5}\n");
  write("b.yaml", "base: [common.yaml]\noptimizer: {lr: 0.2}\n");
  write("ab.yaml", "base: [a.yaml, b.yaml]\nepochs: 4\n");
  write("ba.yaml", "base: [b.yaml, a.yaml]\n");
  const auto ab = load("ab.yaml");  // both include common.yaml: shared, not a cycle
  EXPECT_DOUBLE_EQ(ab.optimizer.lr, 0.2);
  EXPECT_DOUBLE_EQ(ab.optimizer.momentum, 0.5);
  EXPECT_EQ(ab.epochs, 4);
  EXPECT_EQ(ab.logging.interval, 7);
  const auto ba = load("ba.yaml");
  EXPECT_DOUBLE_EQ(ba.optimizer.lr, 0.1);
  EXPECT_EQ(ba.epochs, 2);
}

TEST_F(ConfigBase, ACycleIsRefusedNamingItsFiles) {
  write("a.yaml", "base: b.yaml\nseed: 1\n");
  write("b.yaml", "seed: 2\nbase: a.yaml\n");
  const std::string a = (dir_ / "a.yaml").string(), b = (dir_ / "b.yaml").string();
  const std::string error = errorLoading("a.yaml");
  EXPECT_NE(error.find(b + ":2: the bases form a cycle: " + a + " -> " + b + " -> " + a), std::string::npos) << error;
  write("self.yaml", "base: ./self.yaml\n");
  EXPECT_ERROR_NAMES(load("self.yaml"),
                     "self.yaml:1: the bases form a cycle: " + (dir_ / "self.yaml").string() + " -> ");
}

TEST_F(ConfigBase, AMissingBaseIsNamedWithTheIncludingFile) {
  write("child.yaml", "seed: 1\nbase: [nowhere/missing.yaml]\n");
  const std::string error = errorLoading("child.yaml");
  EXPECT_NE(error.find((dir_ / "child.yaml").string() + ":2: base 'nowhere/missing.yaml' does not exist"),
            std::string::npos)
      << error;
  std::filesystem::create_directories(dir_ / "folder");
  write("dir.yaml", "base: folder\n");
  EXPECT_ERROR_NAMES(load("dir.yaml"), "base 'folder' is not a YAML file");
  write("empty.yaml", "");
  write("onempty.yaml", "base: empty.yaml\n");
  EXPECT_ERROR_NAMES(load("onempty.yaml"), "empty.yaml: the config is empty");
}

TEST_F(ConfigBase, AnErrorInABaseNamesTheBaseFileAndLine) {
  const std::string base = (dir_ / "base.yaml").string(), child = (dir_ / "child.yaml").string();
  write("base.yaml", "seed: 1\n\noptimizer:\n  lr: fast\n");
  write("child.yaml", "base: base.yaml\nepochs: 2\n");
  const std::string error = errorLoading("child.yaml");
  EXPECT_NE(error.find(base + ":4: 'optimizer.lr' must be a number"), std::string::npos) << error;
  EXPECT_EQ(error.find(child), std::string::npos) << error;
  // Unknown keys, list elements and the values' own checks too; and the child's own lines.
  write("base.yaml", "seed: 1\noptimizer:\n  lrr: 0.1\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), base + ":3: unknown key 'optimizer.lrr'");
  write("base.yaml", "schedule:\n  milestones:\n    - 1\n    - x\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), base + ":4: 'schedule.milestones' must be a list of integers");
  write("base.yaml", "schedule: {name: multistep, milestones: [3, 1]}\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), base + ":1: 'schedule.milestones' must increase");
  write("base.yaml", "seed: 1\n");
  write("child.yaml", "base: base.yaml\n\ncomm: {algorithm: fastest}\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), child + ":3: 'comm.algorithm' must be one of");
  // A child overriding a base's bad value fixes it.
  write("base.yaml", "optimizer: {lr: fast}\n");
  write("child.yaml", "base: base.yaml\noptimizer: {lr: 0.5}\n");
  EXPECT_DOUBLE_EQ(load("child.yaml").optimizer.lr, 0.5);
}

TEST_F(ConfigBase, SetOverridesAKeyTheBaseSets) {
  write("base.yaml", "optimizer: {lr: 0.3, momentum: 0.7}\n");
  write("child.yaml", "base: base.yaml\nseed: 4\n");
  const auto c = load("child.yaml", {"optimizer.lr=0.7"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.7);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.7);
  const std::string error = aps::testsupport::errorOf([&] { load("child.yaml", {"optimizer.momentum=2"}); });
  EXPECT_NE(error.find("--set optimizer.momentum=2"), std::string::npos) << error;
  EXPECT_EQ(error.find("base.yaml"), std::string::npos) << error;
}

TEST_F(ConfigBase, ABaseThatNamesNoFileIsRefusedNamingTheFile) {
  const std::string child = (dir_ / "child.yaml").string();
  for (const char* value : {"3", "[a.yaml, 4]", "true", "{file: a.yaml}", "''", "[[a.yaml]]"}) {
    SCOPED_TRACE(value);
    write("child.yaml", std::string("seed: 1\nbase: ") + value + "\n");
    EXPECT_ERROR_NAMES(load("child.yaml"), child + ":2: 'base' must name config files");
  }
  write("child.yaml", "base:\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), "'base' must name config files");
  write("child.yaml", "base: a.yaml\nbase: b.yaml\n");
  EXPECT_ERROR_NAMES(load("child.yaml"), child + ":2: 'base' is given twice");
  write("child.yaml", "model: {base: a.yaml}\n");  // only the top level names bases
  EXPECT_ERROR_NAMES(load("child.yaml"), "unknown key 'model.base'");
}

// The config hashes (every rank's check, a checkpoint's tie to its run) cover the resolved
// values: a config split into a base and a child hashes as the single file did.
TEST_F(ConfigBase, ASplitConfigHashesAsTheSingleFile) {
  write("whole.yaml", "seed: 3\noptimizer: {lr: 0.2, momentum: 0.8}\nprecision: {format: e4m3, scaling: aps}\n");
  write("base.yaml", "optimizer: {momentum: 0.8, lr: 0.1}\nprecision: {scaling: aps}\n");
  write("split.yaml", "seed: 3\nbase: base.yaml\nprecision: {format: e4m3}\noptimizer: {lr: 0.2}\n");
  const auto whole = load("whole.yaml"), split = load("split.yaml");
  EXPECT_EQ(aps::train::configToYaml(whole), aps::train::configToYaml(split));
  EXPECT_EQ(aps::train::configHash(whole), aps::train::configHash(split));
  EXPECT_EQ(aps::train::resumeHash(whole), aps::train::resumeHash(split));
}

// configs/fmnist_resnet20_*.yaml share configs/base/fmnist_resnet20.yaml. Each resolves to what
// it resolved to as a single file before the split: the recipe below is the text all of them
// repeated then (change it with the base when the recipe changes on purpose).
TEST(ConfigBaseShipped, TheResNet20FamilyResolvesAsItsSingleFilesDid) {
  const std::string recipe = R"(model: {name: resnet20, num_classes: 10, in_channels: 1}
data: {dataset: fashion_mnist, batch_size: 32, augment: true, workers: 2}
optimizer: {name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0005, exclude_bias_and_norm: true}
schedule: {name: cosine, warmup_epochs: 0.2, warmup_start_lr: 0.01, scale_with_batch: false}
epochs: 3
seed: 1
comm: {backend: sim, world_size: 4, algorithm: two_shot, overlap: true}
logging: {interval: 50}
)";
  const std::vector<std::pair<std::string, std::string>> family = {
      {"fp32", "precision: {format: fp32}"},
      {"fp16", "precision: {format: fp16}"},
      {"e5m2", "precision: {format: e5m2}"},
      {"e5m2_aps", "precision: {format: e5m2, scaling: aps}"},
      {"e4m3", "precision: {format: e4m3}"},
      {"e4m3_aps", "precision: {format: e4m3, scaling: aps}"},
      {"e3m0_aps", "precision: {format: e3m0, scaling: aps}"},
      {"dettmers8", "precision: {format: dettmers_dynamic/block256}"},
      {"hybrid",
       "precision:\n  format: e4m3\n  scaling: aps\n  hybrid:\n    - {pattern: \"conv1.*\", format: fp16}\n"
       "    - {pattern: \"fc.*\", format: fp16}"},
  };
  const std::string configs = std::string(APS_SOURCE_DIR) + "/configs/";
  for (const auto& [name, precision] : family) {
    SCOPED_TRACE(name);
    const std::string file = configs + "fmnist_resnet20_" + name + ".yaml";
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("base: base/fmnist_resnet20.yaml"), std::string::npos) << text;
    const auto shipped = aps::train::loadConfig(file);
    const auto single = parseConfig(recipe + precision + "\n", "single.yaml");
    EXPECT_EQ(aps::train::configToYaml(shipped), aps::train::configToYaml(single));
    EXPECT_EQ(aps::train::configHash(shipped), aps::train::configHash(single));
  }
}

// A checkpoint resumes on another device: `device` is no part of the comparison, whether the
// checkpoint's stored config names one (as aps wrote before checkpoints could move) or not.
TEST(ConfigResume, DeviceIsNoPartOfTheResumeComparison) {
  const auto onCpu = parseConfig("device: cpu\nprecision: {format: e4m3}\n", "a.yaml");
  const auto onGpu = parseConfig("device: cuda\nprecision: {format: e4m3}\n", "a.yaml");
  EXPECT_TRUE(aps::train::configDifferences(aps::train::resumeYaml(onCpu), aps::train::resumeYaml(onGpu)).empty());
  const std::string older = "device: cpu\n" + aps::train::resumeYaml(onCpu);
  EXPECT_TRUE(aps::train::configDifferences(older, aps::train::resumeYaml(onGpu)).empty());
  // What a run computes still counts.
  const auto other = parseConfig("device: cuda\nprecision: {format: e5m2}\n", "a.yaml");
  EXPECT_FALSE(aps::train::configDifferences(older, aps::train::resumeYaml(other)).empty());
}

}  // namespace

namespace {

// Under a multi-process launcher the file's simulator settings give way to it; --set decides.
TEST(ConfigLauncher, TheLauncherReplacesTheFilesSimulatorButNotAnExplicitSet) {
  const aps::train::Launcher mpirun{2, "mpirun (Open MPI)"};
  const std::string sim = "comm: {backend: sim, world_size: 8}\n";
  const auto launched = parseConfig(sim, "exp.yaml", {}, mpirun);
  EXPECT_EQ(launched.comm.backend, "mpi");
  EXPECT_EQ(launched.comm.worldSize, 1);
  // Not launched: the file as written.
  EXPECT_EQ(parseConfig(sim, "exp.yaml", {}).comm.backend, "sim");
  // A file that says mpi (or nccl) is left alone; one launched process is no launch.
  EXPECT_EQ(parseConfig("comm: {backend: mpi}\n", "exp.yaml", {}, mpirun).comm.backend, "mpi");
  EXPECT_EQ(parseConfig(sim, "exp.yaml", {}, {1, "mpirun (Open MPI)"}).comm.backend, "sim");
  // --set comm.backend=sim asks for the simulator: with one rank per process that is allowed...
  const auto one = parseConfig(sim, "exp.yaml", {"comm.backend=sim", "comm.world_size=1"}, mpirun);
  EXPECT_EQ(one.comm.backend, "sim");
  // ... with several it is refused, naming the --set and the launcher.
  const std::string error =
      aps::testsupport::errorOf([&] { parseConfig(sim, "exp.yaml", {"comm.backend=sim"}, mpirun); });
  EXPECT_NE(error.find("--set comm.backend=sim asks for comm.backend: sim with world_size 8 under mpirun (Open MPI) "
                       "with 2 processes"),
            std::string::npos)
      << error;
  // A --set world_size without the simulator contradicts the launch.
  const std::string world =
      aps::testsupport::errorOf([&] { parseConfig(sim, "exp.yaml", {"comm.world_size=4"}, mpirun); });
  EXPECT_NE(world.find("'comm.world_size' = 4 applies to the sim backend only"), std::string::npos) << world;
}

TEST(ConfigLauncher, OpenMpiAndPmiEnvironmentsAreDetected) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("SLURM_STEP_NUM_TASKS");
  ::unsetenv("PMI_SIZE");
  EXPECT_EQ(aps::train::detectLauncher().processes, 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  EXPECT_EQ(aps::train::detectLauncher().name, "srun (Slurm)");
  ::unsetenv("SLURM_STEP_NUM_TASKS");
  ::setenv("PMI_SIZE", "4", 1);
  EXPECT_EQ(aps::train::detectLauncher().processes, 4);
  EXPECT_EQ(aps::train::detectLauncher().name, "a PMI launcher (PMI_SIZE)");
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  EXPECT_EQ(aps::train::detectLauncher().processes, 3);
  ::setenv("OMPI_COMM_WORLD_SIZE", "x", 1);  // not a count: the next one
  EXPECT_EQ(aps::train::detectLauncher().processes, 4);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
}

}  // namespace

namespace {

// aps_train --help-config: every key from the schema, or one key or section, with its type,
// default, range or choices and help; an unknown name gets a "did you mean".
TEST(ConfigHelp, ListsKeysWithTypeDefaultRangeAndHelp) {
  const std::string all = aps::train::describeConfigKeys();
  for (const auto& key : aps::train::configSchema())
    EXPECT_NE(all.find(key.path + ": "), std::string::npos) << key.path;
  EXPECT_EQ(aps::train::describeConfigKeys("comm.world_size"),
            "comm.world_size: int, default 1, in [1, 1048576]\n    virtual ranks (sim backend)\n");
  const std::string precision = aps::train::describeConfigKeys("precision");
  EXPECT_NE(precision.find("precision.compute: choice, default fp32, one of fp32, fp16_mixed"), std::string::npos);
  EXPECT_EQ(precision.find("comm."), std::string::npos);
  const std::string error = aps::testsupport::errorOf([] { aps::train::describeConfigKeys("optimizr"); });
  EXPECT_NE(error.find("no key or section 'optimizr' (did you mean 'optimizer'?)"), std::string::npos) << error;
}

}  // namespace
