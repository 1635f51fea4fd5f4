// The trainer on a GPU (label cuda: skips without a device; the emulated device of
// APS_CUDA_EMULATION runs it, where every kernel is the CPU's arithmetic): device: cuda trains
// to the CPU run's bits, under the simulator with low-precision gradients too, and
// checkpoints move between the CPU and the GPU in both directions.
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Trainer.h"
#include "tests/common/Datasets.h"
#include "tests/common/ErrorMessage.h"
#include "tests/train/TrainerTestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace aps::train {
namespace {

using testing::bitIdentical;
using testing::smallConfig;
using testing::trainLosses;

#if defined(APS_CUDA_EMULATION)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

class DeviceTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    if (!kEmulated) GTEST_SKIP() << "bit-identity holds on the emulated device; tools/device_check.sh compares a GPU";
    APS_REQUIRE_FASHION_MNIST();
    dir_ = std::filesystem::temp_directory_path() /
           ("aps-device-trainer-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Trains with `extra` on `device`; returns the final weights, its metrics in metricsFile.
  NamedTensors train(const std::string& device, std::vector<std::string> extra, const std::string& metricsFile,
                     const std::string& resumeFrom = "", int ranks = 2) {
    extra.push_back("device=" + device);
    extra.push_back("logging.metrics_file=" + metricsFile);
    Trainer trainer(smallConfig("sim", ranks, extra), nullptr);
    trainer.run(resumeFrom);
    return trainer.modelState();
  }

  std::filesystem::path dir_;
};

TEST_F(DeviceTrainer, Fp32AndE4m3ApsTrainToTheCpuBits) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"max_steps=12"},
        std::vector<std::string>{"max_steps=12", "precision.format=e4m3", "precision.scaling=aps",
                                 "precision.rounding=stochastic"}}) {
    const NamedTensors cpu = train("cpu", extra, path("cpu.jsonl"));
    const NamedTensors gpu = train("cuda", extra, path("gpu.jsonl"));
    std::string differs;
    EXPECT_TRUE(bitIdentical(cpu, gpu, &differs)) << extra.back() << ": first difference in " << differs;
    const auto cpuLosses = trainLosses(path("cpu.jsonl")), gpuLosses = trainLosses(path("gpu.jsonl"));
    EXPECT_EQ(cpuLosses.size(), 12u);
    EXPECT_EQ(cpuLosses, gpuLosses) << extra.back();
  }
}

// Gradient accumulation on the device: each micro-batch is copied when its turn comes, the
// gradients sum in the device's .grad, and the step is the CPU's, bit for bit.
TEST_F(DeviceTrainer, GradientAccumulationTrainsToTheCpuBits) {
  const std::vector<std::string> extra{"max_steps=6", "optimizer.accumulation_steps=2", "precision.format=e4m3",
                                       "precision.scaling=aps"};
  const NamedTensors cpu = train("cpu", extra, path("cpu.jsonl"));
  const NamedTensors gpu = train("cuda", extra, path("gpu.jsonl"));
  std::string differs;
  EXPECT_TRUE(bitIdentical(cpu, gpu, &differs)) << "first difference in " << differs;
  EXPECT_EQ(trainLosses(path("cpu.jsonl")), trainLosses(path("gpu.jsonl")));
  EXPECT_EQ(trainLosses(path("cpu.jsonl")).size(), 6u);
}

// A checkpoint is the same file from either device: a CPU checkpoint resumes on the GPU and a
// GPU checkpoint on the CPU, and both end with the bits of the run that never stopped.
TEST_F(DeviceTrainer, CheckpointsResumeAcrossDevicesBitIdentically) {
  const std::vector<std::string> common{"epochs=1", "precision.format=e5m2", "precision.scaling=aps"};
  const NamedTensors straight = train("cpu", common, path("straight.jsonl"));
  for (const auto& [first, second] : {std::pair<std::string, std::string>{"cpu", "cuda"}, {"cuda", "cpu"}}) {
    const std::string ckpt = path("ckpt-" + first);
    auto stopped = common;
    stopped.push_back("max_steps=7");
    stopped.push_back("checkpoint.dir=" + ckpt);
    train(first, stopped, path("first-" + first + ".jsonl"));
    const auto checkpoints = listCheckpoints(ckpt);
    ASSERT_FALSE(checkpoints.empty()) << first;
    EXPECT_EQ(loadCheckpoint(checkpoints.back()).globalStep, 7);
    const std::string metrics = path("second-" + second + ".jsonl");  // a resumed run appends to its file
    const NamedTensors resumed = train(second, common, metrics, checkpoints.back());
    std::string differs;
    EXPECT_TRUE(bitIdentical(straight, resumed, &differs)) << first << " -> " << second << ": " << differs;
    EXPECT_EQ(trainLosses(metrics).size(), 16u - 7u) << first << " -> " << second;
  }
}

// 16-bit compute on the GPU (convolutions and products on 16-bit operands, every result
// rounded by the device kernels, loss scaling, pure-mode storage with stochastic updates) gives
// the CPU emulation's bits: ResNet-20 (unbiased convolutions, 16-bit on cuDNN) and the small
// convnet (biased convolutions, float32 on cuDNN, and its linear layer on 16-bit cuBLAS).
TEST_F(DeviceTrainer, SixteenBitComputeTrainsToTheCpuBits) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"max_steps=8", "precision.compute=fp16_mixed"},
        std::vector<std::string>{"max_steps=8", "precision.compute=bf16_pure", "precision.stochastic_update=true"},
        std::vector<std::string>{"max_steps=8", "precision.compute=fp16_pure", "precision.format=e4m3",
                                 "precision.scaling=aps"},
        std::vector<std::string>{"max_steps=8", "model.name=convnet", "precision.compute=bf16_mixed"}}) {
    const NamedTensors cpu = train("cpu", extra, path("cpu.jsonl"));
    const NamedTensors gpu = train("cuda", extra, path("gpu.jsonl"));
    std::string differs;
    EXPECT_TRUE(bitIdentical(cpu, gpu, &differs)) << extra[1] << ": first difference in " << differs;
    const auto cpuLosses = trainLosses(path("cpu.jsonl")), gpuLosses = trainLosses(path("gpu.jsonl"));
    EXPECT_EQ(cpuLosses.size(), 8u);
    EXPECT_EQ(cpuLosses, gpuLosses) << extra[1];
  }
}

// Hierarchical APS with the simulator on the device (two groups of two, each level's hooks and
// the world-level probe on host copies of the device buckets): the CPU run's bits.
TEST_F(DeviceTrainer, HierarchicalApsOnTheDeviceTrainsToTheCpuBits) {
  const std::vector<std::string> extra{"max_steps=6",           "precision.format=e4m3",
                                       "precision.scaling=aps", "comm.algorithm=hierarchical",
                                       "comm.group_size=2",     "precision.probe_interval=3"};
  const NamedTensors cpu = train("cpu", extra, path("cpu.jsonl"), "", 4);
  const NamedTensors gpu = train("cuda", extra, path("gpu.jsonl"), "", 4);
  std::string differs;
  EXPECT_TRUE(bitIdentical(cpu, gpu, &differs)) << "first difference in " << differs;
  EXPECT_EQ(trainLosses(path("cpu.jsonl")), trainLosses(path("gpu.jsonl")));
  EXPECT_EQ(trainLosses(path("cpu.jsonl")).size(), 6u);
}

// What comm.backend: nccl does not run is refused at start-up, naming the key, never trained
// otherwise (its runs against the CPU's bits: nccl_same_bits.sh, under mpirun).
TEST_F(DeviceTrainer, NcclRefusesWhatItDoesNotRunNamingTheKey) {
  const auto refusal = [](std::vector<std::string> sets) {
    sets.push_back("comm.backend=nccl");
    sets.push_back("output_dir=none");
    return testsupport::errorOf([&] {
      Trainer(parseConfig("model: {name: resnet20, num_classes: 10, in_channels: 1}\n", "test.yaml", sets), nullptr);
    });
  };
  EXPECT_THAT(refusal({"device=cuda:0"}), ::testing::HasSubstr("each rank takes the GPU of its node-local rank"));
  EXPECT_THAT(refusal({"device=cuda"}), ::testing::HasSubstr("no MPI communicator was given to bootstrap it"));
}

}  // namespace
}  // namespace aps::train
