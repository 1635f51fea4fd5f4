#include "framework/nn/Conv2d.h"

#include "framework/core/Error.h"
#include "framework/nn/Init.h"

namespace aps::nn {

Conv2d::Conv2d(const Conv2dSpec& spec, Rng& rng) : Module("Conv2d"), spec_(spec) {
  const int64_t kh = spec.kernelH > 0 ? spec.kernelH : spec.kernel;
  const int64_t kw = spec.kernelW > 0 ? spec.kernelW : spec.kernel;
  APS_CHECK(spec.in >= 1 && spec.out >= 1 && kh >= 1 && kw >= 1,
            "Conv2d: channels and kernel must be >= 1, got in {} out {} kernel ({}, {})", spec.in, spec.out, kh, kw);
  APS_CHECK(spec.groups >= 1 && spec.in % spec.groups == 0 && spec.out % spec.groups == 0,
            "Conv2d: in {} and out {} channels must be divisible by groups {}", spec.in, spec.out, spec.groups);
  options_ = {spec.stride, spec.stride, spec.padding, spec.padding, spec.dilation, spec.dilation, spec.groups};
  APS_CHECK(spec.stride >= 1 && spec.padding >= 0 && spec.dilation >= 1,
            "Conv2d: stride {} must be >= 1, padding {} >= 0, dilation {} >= 1", spec.stride, spec.padding,
            spec.dilation);
  weight_ = Tensor::empty({spec.out, spec.in / spec.groups, kh, kw});
  if (spec.bias) bias_ = Tensor::empty({spec.out});
  init::defaultLayerInit(weight_, bias_, rng);
  registerParameter("weight", weight_);
  if (spec.bias) registerParameter("bias", bias_);
}

Tensor Conv2d::forward(const Tensor& input) { return ops::conv2d(input, weight_, bias_, options_); }

}  // namespace aps::nn
