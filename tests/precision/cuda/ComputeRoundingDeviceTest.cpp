// 16-bit compute on a GPU (precision.compute, label cuda): the roundings of the compute-precision
// emulation and the loss scaler's unscale, run as device kernels, give the CPU's bits, on
// contiguous tensors and views, including subnormals, overflow to inf and NaN.
#include "framework/core/Error.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/DynamicLossScaler.h"
#include "framework/numerics/FormatRounding.h"
#include "tests/common/RandomVector.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace aps::precision {
namespace {

// Values across every regime of fp16 and bf16: random normals at several scales, subnormals,
// halfway cases, the overflow boundaries, inf and NaN.
std::vector<float> probeValues() {
  std::vector<float> v;
  for (float scale : {1e-8f, 1e-5f, 1.0f, 3e4f, 7e4f, 1e38f}) {
    for (float x : testsupport::randomVector(2000, 11, scale)) v.push_back(x);
  }
  for (float x : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 1.0f + 1.0f / 2048,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max()}) {
    v.push_back(x);
  }
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b, size_t* at) {
  for (size_t i = 0; i < a.size(); ++i) {
    const bool bothNan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!bothNan && std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      *at = i;
      return false;
    }
  }
  return a.size() == b.size();
}

class ComputeRoundingDevice : public ::testing::TestWithParam<ComputeFormat> {
 protected:
  void SetUp() override {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(ComputeRoundingDevice, NearestEvenIsTheCpusOnTensorsAndViews) {
  const std::vector<float> values = probeValues();
  Tensor cpu = Tensor::fromVector(values, {static_cast<int64_t>(values.size())});
  Tensor gpu = cpu.to(Device::cuda());
  roundInPlace(cpu, GetParam());
  roundInPlace(gpu, GetParam());
  size_t at = 0;
  EXPECT_TRUE(sameBits(cpu.toFloatVector(), gpu.toFloatVector(), &at)) << "first difference at " << values[at];

  // A strided view: every other column of a matrix; the rest is left alone.
  const int64_t rows = 100, cols = 40;
  const std::vector<float> m = testsupport::randomVector(rows * cols, 5, 100.0f);
  Tensor cpuM = Tensor::fromVector(m, {rows, cols}), gpuM = cpuM.to(Device::cuda());
  Tensor cpuView = cpuM.transpose(0, 1), gpuView = gpuM.transpose(0, 1);
  roundInPlace(cpuView, GetParam());
  roundInPlace(gpuView, GetParam());
  EXPECT_TRUE(sameBits(cpuM.toFloatVector(), gpuM.toFloatVector(), &at)) << "view, element " << at;
  EXPECT_EQ(countNotRepresentable(gpuM, GetParam()), 0);
}

TEST_P(ComputeRoundingDevice, StochasticIsTheCpusForTheSameSeedAndStream) {
  const std::vector<float> values = probeValues();
  Tensor cpu = Tensor::fromVector(values, {static_cast<int64_t>(values.size())});
  Tensor gpu = cpu.to(Device::cuda());
  roundStochasticInPlace(cpu, GetParam(), 42, 7);
  roundStochasticInPlace(gpu, GetParam(), 42, 7);
  size_t at = 0;
  EXPECT_TRUE(sameBits(cpu.toFloatVector(), gpu.toFloatVector(), &at)) << "first difference at " << values[at];
  Tensor other = Tensor::fromVector(values, {static_cast<int64_t>(values.size())}).to(Device::cuda());
  roundStochasticInPlace(other, GetParam(), 42, 8);  // another stream draws other bits
  EXPECT_NE(other.toFloatVector(), gpu.toFloatVector());
}

TEST_P(ComputeRoundingDevice, LossScalerUnscalesOnTheDeviceAsOnTheCpu) {
  const ComputeFormat format = GetParam();
  auto gradients = [](Device device, bool withInf) {
    NamedTensors params;
    for (int k = 0; k < 3; ++k) {
      Tensor p = Tensor::zeros({1000}, DType::Float32, device);
      std::vector<float> g = testsupport::randomVector(1000, 20 + static_cast<uint32_t>(k), 3e4f);
      if (withInf && k == 1) g[17] = std::numeric_limits<float>::infinity();
      p.setRequiresGrad();
      p.setGrad(Tensor::fromVector(g, {1000}).to(device));
      params.push_back({std::vector<std::string>{"p0", "p1", "p2"}[static_cast<size_t>(k)], p});
    }
    return params;
  };
  DynamicLossScaler scaler;
  for (bool withInf : {false, true}) {
    const NamedTensors cpu = gradients(Device::cpu(), withInf), gpu = gradients(Device::cuda(), withInf);
    EXPECT_EQ(scaler.unscaleGradients(gpu, format), !withInf);
    EXPECT_EQ(scaler.unscaleGradients(cpu, format), !withInf);
    for (size_t k = 0; k < cpu.size(); ++k) {
      size_t at = 0;
      EXPECT_TRUE(sameBits(cpu[k].tensor.grad().toFloatVector(), gpu[k].tensor.grad().toFloatVector(), &at))
          << cpu[k].name << " element " << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, ComputeRoundingDevice,
                         ::testing::Values(ComputeFormat::Fp16, ComputeFormat::BFloat16),
                         [](const auto& p) { return std::string(computeFormatName(p.param)); });

}  // namespace
}  // namespace aps::precision
