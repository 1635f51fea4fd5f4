#include "framework/nn/BatchNorm2d.h"

#include "framework/core/Error.h"
#include "framework/ops/BatchNorm.h"

namespace aps::nn {

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum)
    : Module("BatchNorm2d"), eps_(eps), momentum_(momentum) {
  APS_CHECK(channels >= 1, "BatchNorm2d: channels must be >= 1, got {}", channels);
  weight_ = registerParameter("weight", Tensor::ones({channels}));
  bias_ = registerParameter("bias", Tensor::zeros({channels}));
  runningMean_ = registerBuffer("running_mean", Tensor::zeros({channels}));
  runningVar_ = registerBuffer("running_var", Tensor::ones({channels}));
  batchesTracked_ = registerBuffer("num_batches_tracked", Tensor::zeros({}, DType::Int64));
}

Tensor BatchNorm2d::forward(const Tensor& input) {
  if (isTraining()) batchesTracked_.data<int64_t>()[0] += 1;
  return ops::batchNorm2d(input, weight_, bias_, runningMean_, runningVar_, isTraining(), momentum_, eps_);
}

Tensor BatchNorm2d::forwardRelu(const Tensor& input, const Tensor& residual) {
  if (isTraining()) batchesTracked_.data<int64_t>()[0] += 1;
  return ops::batchNorm2dRelu(input, weight_, bias_, runningMean_, runningVar_, isTraining(), momentum_, eps_,
                              residual);
}

}  // namespace aps::nn
