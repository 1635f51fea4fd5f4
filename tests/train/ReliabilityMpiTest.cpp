// Under mpirun: NaN / inf injected into one rank's gradients at random steps and layers is
// seen by every rank (the all-reduce carries the flag), so all ranks skip the same steps and
// keep identical, finite weights; under precision.nonfinite = stop every rank stops with a
// message naming the step.
#include "comm/MpiCommunicator.h"
#include "framework/train/FaultInjection.h"
#include "framework/train/Trainer.h"
#include "models/ModelRegistry.h"
#include "tests/common/ErrorMessage.h"
#include "tests/train/TrainerTestSupport.h"

#include "tests/common/Datasets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

namespace aps::train {
namespace {

using testing::smallConfig;

std::shared_ptr<comm::MpiCommunicator> world() {
  static auto communicator = std::make_shared<comm::MpiCommunicator>();
  return communicator;
}

class InjectedFaults {
 public:
  explicit InjectedFaults(const std::string& spec) { ::setenv(FaultInjection::kEnvironmentVariable, spec.c_str(), 1); }
  ~InjectedFaults() { ::unsetenv(FaultInjection::kEnvironmentVariable); }
};

uint64_t stateHash(const NamedTensors& state, bool& finite) {
  uint64_t h = 1469598103934665603ull;
  finite = true;
  for (const auto& [name, tensor] : state) {
    const Tensor t = tensor.contiguous();
    if (t.dtype() == DType::Float32) {
      for (float v : t.toFloatVector()) finite = finite && std::isfinite(v);
    }
    const auto* p = static_cast<const unsigned char*>(t.rawData());
    for (size_t i = 0; i < static_cast<size_t>(t.numel()) * dtypeSize(t.dtype()); ++i)
      h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

void expectSameSkipsEverywhere(const std::vector<std::string>& precision) {
  APS_REQUIRE_FASHION_MNIST();
  auto mpi = world();
  const int n = mpi->size();
  // Rank 0 draws the faults; every rank gets the same list.
  uint32_t seed = std::random_device{}();
  mpi->broadcast(&seed, sizeof(seed), 0);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  constexpr int64_t kSteps = 8;
  const auto params = static_cast<int64_t>(models::createModel("convnet", {10, 1, 1})->namedParameters().size());
  std::string spec;
  std::set<int64_t> steps;
  for (int i = 0; i < 3; ++i) {
    const int64_t step = std::uniform_int_distribution<int64_t>(0, kSteps - 1)(rng);
    const int rank = std::uniform_int_distribution<int>(0, n - 1)(rng);
    const int64_t param = std::uniform_int_distribution<int64_t>(0, params - 1)(rng);
    spec += fmt::format("{}@rank={},step={},param={};", rng() % 2 ? "nan" : "inf", rank, step, param);
    steps.insert(step);
  }
  SCOPED_TRACE(spec);
  auto extra = precision;
  extra.insert(extra.end(), {"model.name=convnet", "max_steps=" + std::to_string(kSteps)});
  InjectedFaults faults(spec);
  Trainer trainer(smallConfig("mpi", n, extra), mpi);
  const TrainSummary summary = trainer.run();
  EXPECT_EQ(summary.skippedSteps, static_cast<int64_t>(steps.size()));
  bool finite = false;
  const uint64_t local[2] = {stateHash(trainer.modelState(), finite), static_cast<uint64_t>(summary.skippedSteps)};
  EXPECT_TRUE(finite);
  std::vector<uint64_t> all(2 * static_cast<size_t>(n));
  mpi->allGather(local, sizeof(local), all.data());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[2 * static_cast<size_t>(r)], all[0]) << "rank " << r << " holds other weights";
    EXPECT_EQ(all[2 * static_cast<size_t>(r) + 1], all[1]) << "rank " << r << " skipped other steps";
  }
  mpi->barrier();
}

TEST(PoisonedGradientsMpi, EveryRankSkipsTheSameStepsWithFp32) { expectSameSkipsEverywhere({"precision.format=fp32"}); }

TEST(PoisonedGradientsMpi, EveryRankSkipsTheSameStepsWithE4m3AndAps) {
  expectSameSkipsEverywhere({"precision.format=e4m3", "precision.scaling=aps"});
}

TEST(PoisonedGradientsMpi, EveryRankStopsUnderPolicyStop) {
  APS_REQUIRE_FASHION_MNIST();
  auto mpi = world();
  InjectedFaults faults(fmt::format("nan@rank={},step=3,param=2", mpi->size() - 1));
  Trainer trainer(smallConfig("mpi", mpi->size(), {"model.name=convnet", "max_steps=6", "precision.nonfinite=stop"}),
                  mpi);
  const std::string message = testsupport::errorOf([&] { trainer.run(); });
  EXPECT_NE(message.find("step 3: a gradient holds NaN or inf"), std::string::npos)
      << "rank " << mpi->rank() << ": " << message;
  mpi->barrier();
}

}  // namespace
}  // namespace aps::train
