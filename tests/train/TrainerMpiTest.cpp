// Under mpirun: the same short run with N real ranks and with N simulated ranks (in this
// process, after the real one) ends with bit-identical weights, for a low-precision format
// with APS; and every rank holds the same weights.
#include "comm/MpiCommunicator.h"
#include "framework/train/Trainer.h"
#include "tests/train/TrainerTestSupport.h"

#include "tests/common/Datasets.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>

namespace aps::train {
namespace {

using testing::bitIdentical;
using testing::smallConfig;

std::shared_ptr<comm::MpiCommunicator> world() {
  static auto communicator = std::make_shared<comm::MpiCommunicator>();
  return communicator;
}

uint64_t stateHash(const NamedTensors& state) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, tensor] : state) {
    const Tensor t = tensor.contiguous();
    const auto* p = static_cast<const unsigned char*>(t.rawData());
    for (size_t i = 0; i < static_cast<size_t>(t.numel()) * dtypeSize(t.dtype()); ++i)
      h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// The "layers" of every "train" line of a metrics file.
std::vector<nlohmann::json> trainLayers(const std::string& file) {
  std::vector<nlohmann::json> layers;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") == "train") layers.push_back(j.value("layers", nlohmann::json()));
  }
  return layers;
}

// The "probe" lines of a metrics file, without their time.
std::vector<nlohmann::json> probeLines(const std::string& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    j.erase("time");  // when it was written differs
    if (j.at("type") == "probe") lines.push_back(std::move(j));
  }
  return lines;
}

void expectSimMatchesMpi(std::vector<std::string> precision) {
  APS_REQUIRE_FASHION_MNIST();
  auto mpi = world();
  const int n = mpi->size();
  const std::string metrics =
      (std::filesystem::temp_directory_path() / ("aps-simmpi-" + std::to_string(::getppid()) + ".jsonl")).string();
  auto realPrecision = precision;
  realPrecision.push_back("logging.metrics_file=" + metrics);  // rank 0 writes it
  Trainer real(smallConfig("mpi", n, realPrecision), mpi);
  real.run();
  const NamedTensors realState = real.modelState();
  // Every rank ends with the same bits.
  const uint64_t hash = stateHash(realState);
  std::vector<uint64_t> hashes(static_cast<size_t>(n));
  mpi->allGather(&hash, sizeof(hash), hashes.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(hashes[static_cast<size_t>(r)], hashes[0]) << "rank " << r;
  if (mpi->rank() == 0) {
    auto simPrecision = precision;
    simPrecision.push_back("logging.metrics_file=" + metrics + ".sim");
    Trainer simulated(smallConfig("sim", n, simPrecision), nullptr);
    simulated.run();
    std::string diff;
    EXPECT_TRUE(bitIdentical(realState, simulated.modelState(), &diff)) << "first difference: " << diff;
    // The logged training loss is the same number under both (one fp32 sum in rank order).
    const auto realLosses = testing::trainLosses(metrics), simLosses = testing::trainLosses(metrics + ".sim");
    EXPECT_FALSE(realLosses.empty());
    EXPECT_EQ(realLosses, simLosses);
    // The fidelity probe's records (precision.probe_interval) are the same too.
    // So are the per-layer statistics of the train records (rank 0's inputs; every rank's
    // re-encoded sums, summed over ranks).
    EXPECT_EQ(trainLayers(metrics), trainLayers(metrics + ".sim"));
    const auto realProbes = probeLines(metrics), simProbes = probeLines(metrics + ".sim");
    EXPECT_EQ(realProbes, simProbes);
    const bool probing = std::any_of(precision.begin(), precision.end(),
                                     [](const std::string& s) { return s.starts_with("precision.probe_interval"); });
    EXPECT_EQ(realProbes.empty(), !probing);
    std::filesystem::remove(metrics);
    std::filesystem::remove(metrics + ".sim");
  }
  mpi->barrier();
}

// A tiny run under mpirun learns: the loss falls well below its start (64 steps of 8 per rank).
TEST(TrainerMpi, LearnsUnderMpirun) {
  APS_REQUIRE_FASHION_MNIST();
  auto mpi = world();
  const std::string metrics = (std::filesystem::temp_directory_path() / "aps-mpi-learns.jsonl").string();
  Trainer trainer(smallConfig("mpi", mpi->size(),
                              {"data.train_samples=" + std::to_string(512 * mpi->size()), "optimizer.lr=0.1",
                               "precision.format=e4m3", "precision.scaling=aps", "logging.metrics_file=" + metrics}),
                  mpi);
  const TrainSummary summary = trainer.run();
  if (mpi->rank() == 0) {
    const auto losses = testing::trainLosses(metrics);
    ASSERT_EQ(static_cast<int64_t>(losses.size()), summary.steps);
    ASSERT_GE(losses.size(), 16u);
    double first = 0, last = 0;
    for (size_t i = 0; i < 6; ++i) {
      first += losses[i] / 6;
      last += losses[losses.size() - 1 - i] / 6;
    }
    EXPECT_LT(last, 0.75 * first) << "first " << first << " last " << last;
    std::filesystem::remove(metrics);
  }
  mpi->barrier();
}

TEST(TrainerMpi, SimMatchesMpiWithE4m3AndAps) {
  expectSimMatchesMpi({"precision.format=e4m3", "precision.scaling=aps", "max_steps=6"});
}

TEST(TrainerMpi, SimMatchesMpiWithStochasticE5m2RingAndHybrid) {
  expectSimMatchesMpi({"precision.format=e5m2", "precision.rounding=stochastic", "comm.algorithm=ring",
                       "precision.hybrid=[{pattern: 'fc.*', format: fp16}]", "max_steps=4"});
}

TEST(TrainerMpi, SimMatchesMpiWithErrorFeedbackAndHybridAuto) {
  expectSimMatchesMpi({"model.name=convnet", "precision.format=e3m0", "precision.scaling=aps",
                       "precision.error_feedback=true", "precision.hybrid_auto=true", "precision.stats_window=2",
                       "precision.hybrid_underflow=0.2", "max_steps=8"});
}

// The fidelity probe gives the same figures with real and simulated ranks (its shadow sum and
// its counts go through the transport), for two_shot and for ring's per-hop counts.
TEST(TrainerMpi, SimMatchesMpiWithFidelityProbe) {
  expectSimMatchesMpi({"model.name=convnet", "precision.format=e4m3", "precision.probe_interval=2", "max_steps=5"});
  expectSimMatchesMpi({"model.name=convnet", "precision.format=e3m0", "precision.scaling=aps", "comm.algorithm=ring",
                       "precision.probe_interval=2", "max_steps=3"});
}

TEST(TrainerMpi, SimMatchesMpiWithAutoscale) {
  expectSimMatchesMpi({"model.name=convnet", "precision.format=e4m3", "precision.scaling=autoscale", "max_steps=6"});
}

// Hierarchical APS in groups of 2 (under -np 4 two groups and two leaders; under -np 2 the
// one group is the flat reduction): the simulation gives mpirun's bits.
TEST(TrainerMpi, SimMatchesMpiWithHierarchicalAps) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  expectSimMatchesMpi({"model.name=convnet", "precision.format=e4m3", "precision.scaling=aps",
                       "comm.algorithm=hierarchical", "comm.group_size=2", "max_steps=6"});
}

// Model parallelism (parallel.model_parallel = 2: under -np 2 one group of 2, under -np 4 two
// data-parallel groups of 2): the split layers' activations and errors in Dettmers' 8-bit tree
// and in stochastically rounded E4M3 give the simulator's bits.
TEST(TrainerMpi, SimMatchesMpiWithModelParallelLayers) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const std::vector<std::string> mlp{"model.name=mlp", "model.widths=[784, 64, 32]", "data.augment=false",
                                     "parallel.model_parallel=2", "parallel.split=[fc1, fc2]", "max_steps=5"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), mlp.begin(), mlp.end());
    return extra;
  };
  expectSimMatchesMpi(with({"parallel.activation_format=dettmers_dynamic", "precision.format=e4m3",
                            "precision.scaling=aps"}));
  expectSimMatchesMpi(with({"parallel.activation_format=e4m3:stochastic", "precision.format=e5m2",
                            "comm.algorithm=ring"}));
}

// Every rank's error-feedback residual travels to rank 0's checkpoint and back: a run stopped
// and resumed under mpirun ends with the bits of an uninterrupted one.
TEST(TrainerMpi, ResumeWithErrorFeedbackIsBitIdentical) {
  APS_REQUIRE_FASHION_MNIST();
  auto mpi = world();
  const int n = mpi->size();
  const std::string dir = (std::filesystem::temp_directory_path() / "aps-mpi-ef-resume").string();
  if (mpi->rank() == 0) std::filesystem::remove_all(dir);
  mpi->barrier();
  const std::vector<std::string> common{"model.name=convnet", "precision.format=e3m0", "precision.scaling=aps",
                                        "precision.error_feedback=true"};
  Trainer straight(smallConfig("mpi", n, common), mpi);
  straight.run();
  auto first = common;
  first.insert(first.end(), {"max_steps=5", "checkpoint.dir=" + dir});
  {
    Trainer stopped(smallConfig("mpi", n, first), mpi);
    stopped.run();
  }
  mpi->barrier();
  Trainer resumed(smallConfig("mpi", n, common), mpi);
  resumed.run(dir + "/checkpoint-0000000005.safetensors");
  std::string diff;
  EXPECT_TRUE(bitIdentical(straight.modelState(), resumed.modelState(), &diff)) << "first difference: " << diff;
  mpi->barrier();
  if (mpi->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace aps::train
