#pragma once

#include "framework/core/Rng.h"
#include "framework/tensor/Tensor.h"

#include <cstdint>
#include <utility>

namespace aps::nn::init {

enum class FanMode { FanIn, FanOut };

// (fan_in, fan_out) as torch.nn.init computes them: size(1) and size(0) times the receptive
// field (product of the remaining dims).
std::pair<int64_t, int64_t> fans(const Tensor& weight);

// He et al. 2015 ("Delving deep into rectifiers"): N(0, gain / sqrt(fan)) with the ReLU gain
// sqrt(2 / (1 + a^2)) (a = 0: plain ReLU). torchvision ResNets use mode FanOut, a = 0.
void kaimingNormal(Tensor& weight, Rng& rng, FanMode mode = FanMode::FanOut, double a = 0.0);
// U(-bound, bound), bound = gain * sqrt(3 / fan).
void kaimingUniform(Tensor& weight, Rng& rng, FanMode mode = FanMode::FanIn, double a = 0.0);
void uniform(Tensor& t, Rng& rng, double low, double high);
void normal(Tensor& t, Rng& rng, double mean, double stddev);
void constant(Tensor& t, double value);

// PyTorch's default for Linear and Conv2d (reset_parameters): kaiming_uniform(a = sqrt(5))
// on the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias (if defined).
void defaultLayerInit(Tensor& weight, Tensor& bias, Rng& rng);

}  // namespace aps::nn::init
