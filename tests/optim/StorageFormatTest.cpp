// Optimizer::setStorageFormat: pure 16-bit parameters and optimizer state.
#include "framework/optim/AdamW.h"
#include "framework/optim/Lars.h"
#include "framework/optim/Sgd.h"
#include "framework/numerics/FormatRounding.h"

#include <gtest/gtest.h>

#include <memory>

namespace {

using aps::NamedTensors;
using aps::Tensor;
namespace ag = aps::autograd;
namespace optim = aps::optim;

NamedTensors params(float value, int64_t n) {
  return {{"w", Tensor::full({n}, value).setRequiresGrad()}, {"b", Tensor::full({3}, 0.1f).setRequiresGrad()}};
}

void setGrads(NamedTensors& ps, float g) {
  for (auto& p : ps) p.tensor.setGrad(Tensor::full(p.tensor.sizes(), g));
}

TEST(StorageFormat, EveryOptimizerKeepsParametersAndStateInTheFormat) {
  for (aps::precision::ComputeFormat f :
       {aps::precision::ComputeFormat::Fp16, aps::precision::ComputeFormat::BFloat16}) {
    for (int kind = 0; kind < 3; ++kind) {
      NamedTensors ps = params(0.3f, 100);  // 0.3 and 0.1 are not 16-bit values
      std::unique_ptr<optim::Optimizer> opt;
      if (kind == 0) opt = std::make_unique<optim::Sgd>(ps, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
      if (kind == 1) opt = std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01});
      if (kind == 2) opt = std::make_unique<optim::Lars>(ps, optim::LarsOptions{.lr = 0.1, .momentum = 0.9});
      opt->setStorageFormat(f);
      for (const auto& p : ps) EXPECT_EQ(aps::precision::countNotRepresentable(p.tensor, f), 0);
      for (int step = 0; step < 3; ++step) {
        setGrads(ps, 0.0123f);
        opt->step();
        for (const auto& p : ps) EXPECT_EQ(aps::precision::countNotRepresentable(p.tensor, f), 0) << kind;
        for (const auto& s : opt->stateDict()) {
          if (s.tensor.dtype() == aps::DType::Float32) {
            EXPECT_EQ(aps::precision::countNotRepresentable(s.tensor, f), 0) << s.name;
          }
        }
      }
      EXPECT_NE(ps[0].tensor.toFloatVector()[0], aps::precision::roundNearestEven(0.3f, f));  // it moved
    }
  }
}

// An update below half a grid step is lost with nearest-even and survives in expectation
// with stochastic rounding (Gupta et al. 2015), reproducibly for a seed.
TEST(StorageFormat, StochasticRoundingKeepsSmallUpdatesInExpectation) {
  const int64_t n = 8192;
  auto run = [&](bool stochastic, uint64_t seed) {
    NamedTensors ps = params(1.0f, n);
    optim::Sgd sgd(ps, {.lr = 1.0});
    sgd.setStorageFormat(aps::precision::ComputeFormat::Fp16, stochastic, seed);
    setGrads(ps, 0x1p-13f);  // a quarter of the grid step 2^-11 below 1
    sgd.step();
    return ps[0].tensor.toFloatVector();
  };
  const auto nearest = run(false, 0);
  for (float v : nearest) ASSERT_EQ(v, 1.0f);
  const auto sr = run(true, 5);
  double mean = 0.0;
  for (float v : sr) {
    ASSERT_TRUE(v == 1.0f || v == 1.0f - 0x1p-11f) << v;
    mean += v;
  }
  mean /= static_cast<double>(n);
  EXPECT_NEAR(mean, 1.0 - 0x1p-13, 3e-6);
  EXPECT_EQ(run(true, 5), sr);
  EXPECT_NE(run(true, 6), sr);
}

}  // namespace
