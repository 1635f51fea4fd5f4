#include "framework/nn/Init.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps::nn::init {

namespace {
void checkWritable(const char* fn, const Tensor& t) {
  APS_CHECK(t.defined() && t.dtype() == DType::Float32 && t.isContiguous(),
            "init::{}: needs a contiguous float32 tensor", fn);
}

double gainFor(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }
}  // namespace

std::pair<int64_t, int64_t> fans(const Tensor& weight) {
  APS_CHECK(weight.dim() >= 2, "init: fan in/out need at least 2 dims, got shape {}", weight.shapeString());
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

void kaimingNormal(Tensor& weight, Rng& rng, FanMode mode, double a) {
  const auto [fanIn, fanOut] = fans(weight);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fanIn : fanOut);
  normal(weight, rng, 0.0, gainFor(a) / std::sqrt(fan));
}

void kaimingUniform(Tensor& weight, Rng& rng, FanMode mode, double a) {
  const auto [fanIn, fanOut] = fans(weight);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fanIn : fanOut);
  const double bound = gainFor(a) * std::sqrt(3.0 / fan);
  uniform(weight, rng, -bound, bound);
}

void uniform(Tensor& t, Rng& rng, double low, double high) {
  checkWritable("uniform", t);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(low + (high - low) * rng.uniformDouble());
}

void normal(Tensor& t, Rng& rng, double mean, double stddev) {
  checkWritable("normal", t);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = rng.normal(static_cast<float>(mean), static_cast<float>(stddev));
}

void constant(Tensor& t, double value) {
  checkWritable("constant", t);
  t.fill(value);
}

void defaultLayerInit(Tensor& weight, Tensor& bias, Rng& rng) {
  kaimingUniform(weight, rng, FanMode::FanIn, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fans(weight).first));
    uniform(bias, rng, -bound, bound);
  }
}

}  // namespace aps::nn::init
