#pragma once

// Finite-difference gradient check shared by the op and layer tests (ggml style): the
// analytic gradient of L = sum(f(inputs) * w), for a fixed random w, against central
// differences of L in each input element that requires grad.

#include "framework/autograd/Engine.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Rng.h"
#include "framework/tensor/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace aps::testing {

struct GradCheckOptions {
  double eps = 1e-2;  // step (float32 inputs: large enough to rise above rounding)
  double atol = 2e-3;
  double rtol = 2e-2;
};

inline double weightedSum(const Tensor& out, const std::vector<float>& w) {
  const std::vector<float> v = out.toFloatVector();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * w[i];
  return s;
}

// inputs: the tensors f reads; those with requiresGrad() are checked. Returns false (and
// records gtest failures) on the first input whose gradient disagrees.
inline void expectGradientsMatch(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                                 const GradCheckOptions& options = {}) {
  for (Tensor& t : inputs) {
    if (t.requiresGrad()) t.setGrad(Tensor());
  }
  const Tensor out = f(inputs);
  ASSERT_TRUE(out.requiresGrad()) << "the function recorded no history";
  Rng rng(1234);
  std::vector<float> w(static_cast<size_t>(out.numel()));
  for (float& v : w) v = rng.uniform() * 2.0f - 1.0f;
  autograd::backward(out, Tensor::fromVector(w, out.sizes()));

  autograd::NoGradGuard noGrad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requiresGrad()) continue;
    ASSERT_TRUE(x.grad().defined()) << "input " << k << " got no gradient";
    const std::vector<float> analytic = x.grad().toFloatVector();
    float* p = x.data<float>();
    int failures = 0;
    for (int64_t i = 0; i < x.numel() && failures < 5; ++i) {
      const float saved = p[i];
      p[i] = static_cast<float>(saved + options.eps);
      const double plus = weightedSum(f(inputs), w);
      p[i] = static_cast<float>(saved - options.eps);
      const double minus = weightedSum(f(inputs), w);
      p[i] = saved;
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double a = analytic[static_cast<size_t>(i)];
      if (std::abs(a - numeric) > options.atol + options.rtol * std::abs(numeric)) {
        ADD_FAILURE() << "input " << k << " element " << i << ": analytic " << a << " vs numeric " << numeric;
        ++failures;
      }
    }
  }
}

}  // namespace aps::testing
