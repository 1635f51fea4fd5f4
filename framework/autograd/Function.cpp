#include "framework/autograd/Function.h"

#include "framework/autograd/AccumulateGrad.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/numerics/FormatRounding.h"

namespace aps::autograd {

using precision::roundInPlace;

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& gradOutputs) {
  if (!gradOutputs.at(0).defined()) return std::vector<Tensor>(nextEdges().size());
  APS_CHECK(!released_,
            "backward: {} ran before and its saved tensors were released; pass retainGraph = true to "
            "the first backward to go through a graph twice",
            name());
  std::vector<Tensor> grads = backward_(gradOutputs[0]);
  APS_ASSERT(grads.size() == nextEdges().size());
  return grads;
}

void FunctionNode::releaseSaved() {
  backward_ = nullptr;
  released_ = true;
}

bool needsGrad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::isEnabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requiresGrad()) return true;
  }
  return false;
}

bool needsGrad(const std::vector<Tensor>& inputs) {
  if (!GradMode::isEnabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requiresGrad()) return true;
  }
  return false;
}

Edge gradientEdge(const Tensor& t) {
  if (!t.defined() || !t.requiresGrad()) return {};
  const auto& slots = t.impl().autograd();
  if (slots.gradFn) return {slots.gradFn, slots.outputNr};
  return {AccumulateGrad::of(t), 0};
}

void recordHistory(Tensor& output, const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs) {
  for (const Tensor& input : inputs) node->addNextEdge(gradientEdge(input));
  auto& slots = output.impl().autograd();
  slots.requiresGrad = true;
  slots.gradFn = node;
  slots.outputNr = 0;
}

namespace {
// Rounds an op's output to the current compute format; returns the format it now holds.
ComputeFormat roundOutput(Tensor& output, const std::vector<Tensor>& inputs, OpPrecision precision) {
  const ComputePrecision current = ComputePrecision::current();
  if (current.isFp32() || output.dtype() != DType::Float32) return ComputeFormat::Fp32;
  for (const Tensor& input : inputs) {
    if (input.defined() && output.sharesStorage(input)) return formatOf(input);
  }
  if (precision == OpPrecision::Fp32WhenMixed && current.isMixed()) return ComputeFormat::Fp32;
  roundInPlace(output, current.format());
  return current.format();
}
}  // namespace

Tensor& recordFunction(Tensor& output, const char* name, const std::vector<Tensor>& inputs,
                       FunctionNode::Backward backward, OpPrecision precision) {
  const ComputeFormat format = roundOutput(output, inputs, precision);
  if (needsGrad(inputs)) {
    auto node = std::make_shared<FunctionNode>(name, std::move(backward));
    node->setGradFormat(format);
    recordHistory(output, node, inputs);
  }
  return output;
}

void addLeafHook(Tensor& leaf, std::shared_ptr<LeafHook> hook) {
  APS_CHECK(leaf.isLeaf() && leaf.requiresGrad(), "addLeafHook: tensor of shape {} is not a leaf requiring grad",
            leaf.shapeString());
  APS_CHECK(hook != nullptr, "addLeafHook: no hook for the tensor of shape {}", leaf.shapeString());
  leaf.impl().autograd().leafHooks.push_back(std::move(hook));
}

void addGradReadyHook(Tensor& leaf, std::function<void(Tensor&)> fn) {
  class Ready : public LeafHook {
   public:
    explicit Ready(std::function<void(Tensor&)> fn) : fn_(std::move(fn)) {}
    void ready(Tensor& leaf) override { fn_(leaf); }

   private:
    std::function<void(Tensor&)> fn_;
  };
  addLeafHook(leaf, std::make_shared<Ready>(std::move(fn)));
}

void runLeafHooks(Tensor& leaf) {
  for (auto& hook : leaf.impl().autograd().leafHooks) hook->ready(leaf);
}

}  // namespace aps::autograd
