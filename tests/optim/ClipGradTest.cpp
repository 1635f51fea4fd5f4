// Gradient clipping with PyTorch's semantics (torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_), on hand-computed cases.
#include "framework/core/Error.h"
#include "framework/optim/ClipGrad.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace aps::optim {
namespace {

NamedTensors withGrads(const std::vector<std::vector<float>>& grads) {
  NamedTensors params;
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor p = Tensor::zeros({static_cast<int64_t>(grads[i].size())});
    p.setRequiresGrad(true);
    p.setGrad(Tensor::zeros({static_cast<int64_t>(grads[i].size())}));
    Tensor g = p.grad();
    for (size_t k = 0; k < grads[i].size(); ++k) g.data<float>()[k] = grads[i][k];
    params.push_back({fmt::format("p{}", i), p});
  }
  return params;
}

std::vector<float> gradOf(const NamedTensor& p) {
  const Tensor g = p.tensor.grad();
  return {g.data<float>(), g.data<float>() + g.numel()};
}

TEST(ClipGradNorm, ScalesEveryGradientByMaxOverTheGlobalNorm) {
  // Two tensors, global norm sqrt(9 + 16 + 144) = 13.
  const NamedTensors params = withGrads({{3.0f, 4.0f}, {12.0f}});
  const double norm = clipGradNorm(params, 1.0);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const auto factor = static_cast<float>(1.0 / (13.0 + 1e-6));
  EXPECT_EQ(gradOf(params[0]), (std::vector<float>{3.0f * factor, 4.0f * factor}));
  EXPECT_EQ(gradOf(params[1]), (std::vector<float>{12.0f * factor}));
}

TEST(ClipGradNorm, LeavesGradientsWithinTheNormUntouched) {
  const NamedTensors params = withGrads({{3.0f, 4.0f}});
  EXPECT_DOUBLE_EQ(clipGradNorm(params, 5.5), 5.0);
  EXPECT_EQ(gradOf(params[0]), (std::vector<float>{3.0f, 4.0f}));
}

TEST(ClipGradNorm, ANonFiniteNormScalesNothing) {
  const NamedTensors params = withGrads({{std::numeric_limits<float>::infinity(), 1.0f}});
  EXPECT_TRUE(std::isinf(clipGradNorm(params, 1.0)));
  EXPECT_EQ(gradOf(params[0])[1], 1.0f);
}

TEST(ClipGradValue, ClampsEachValue) {
  const NamedTensors params = withGrads({{-3.0f, 0.25f, 2.0f}});
  clipGradValue(params, 0.5);
  EXPECT_EQ(gradOf(params[0]), (std::vector<float>{-0.5f, 0.25f, 0.5f}));
}

TEST(ClipGrad, RefusesANonPositiveBound) {
  const NamedTensors params = withGrads({{1.0f}});
  EXPECT_THROW(clipGradNorm(params, 0.0), Error);
  EXPECT_THROW(clipGradValue(params, -1.0), Error);
}

}  // namespace
}  // namespace aps::optim
