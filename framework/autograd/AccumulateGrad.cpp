#include "framework/autograd/AccumulateGrad.h"

#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Function.h"
#include "framework/autograd/GradAccumulation.h"
#include "framework/core/Error.h"
#include "framework/numerics/FormatRounding.h"

namespace aps::autograd {

using precision::roundInPlace;

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}

std::shared_ptr<Node> AccumulateGrad::of(const Tensor& leaf) {
  auto& slots = leaf.impl().autograd();
  if (auto existing = slots.gradAccumulator.lock()) return existing;
  auto node = std::make_shared<AccumulateGrad>(leaf.implPtr());
  // Mixed precision accumulates into fp32 master gradients; pure keeps them 16-bit.
  node->setGradFormat(ComputePrecision::current().parameterFormat());
  slots.gradAccumulator = node;
  return node;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& gradOutputs) {
  Tensor leaf(leaf_);
  const Tensor& incoming = gradOutputs.at(0);
  if (incoming.defined()) {
    APS_CHECK(incoming.sizes() == leaf.sizes(), "backward: gradient of shape {} for a leaf of shape {}",
              incoming.shapeString(), leaf.shapeString());
    auto& slots = leaf_->autograd();
    if (slots.grad && slots.gradZeroPending) {
      slots.gradZeroPending = false;
      // A hook that takes the gradient stands for .grad (which then holds nothing of this
      // backward) and ready() (LeafHook::takeFirst).
      if (slots.leafHooks.size() == 1 && gradFormat() == ComputeFormat::Fp32 && incoming.isContiguous() &&
          incoming.dtype() == DType::Float32 && slots.leafHooks[0]->takeFirst(incoming))
        return {};
      Tensor grad(slots.grad);
      assignZeroPlus(grad, incoming);  // the bits of zero() then addInto
      roundInPlace(grad, gradFormat());
    } else if (Tensor grad = leaf.grad(); grad.defined()) {
      addInto(grad, incoming);
      roundInPlace(grad, gradFormat());  // the sum of 16-bit gradients, rounded (pure modes)
    } else {
      leaf.setGrad(incoming.clone());
    }
  }
  runLeafHooks(leaf);
  return {};
}

}  // namespace aps::autograd
