#pragma once

#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Node.h"

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace aps::autograd {

// A node whose backward is a closure: given the gradient of the (single) output it returns
// one gradient per input, in the order the inputs were recorded (undefined = none). Closures
// should capture tensors with detach() so the graph holds no cycles through saved outputs.
class FunctionNode : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const Tensor& gradOutput)>;
  FunctionNode(std::string name, Backward backward) : Node(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& gradOutputs) override;
  void releaseSaved() override;

 private:
  Backward backward_;
  bool released_ = false;
};

// True when grad mode is on and any input requires grad: whether an op must record history.
bool needsGrad(std::initializer_list<Tensor> inputs);
bool needsGrad(const std::vector<Tensor>& inputs);

// The edge a gradient for `t` flows along: its producer, its leaf accumulator, or none.
Edge gradientEdge(const Tensor& t);

// Makes `output` the result of `node` applied to `inputs` (history for backward).
void recordHistory(Tensor& output, const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs);

// Records a FunctionNode when needsGrad(inputs). Every op calls it once with its fresh
// output, so this is where compute precision rounds forward outputs (ComputePrecision.h):
// under a 16-bit mode the output is rounded in place to the format (with or without grad
// mode), unless it is a view sharing an input's storage (it then holds the input's values)
// or the op is autocast's fp32 kind in a mixed mode. The node remembers the output's
// format for the engine. Returns output.
Tensor& recordFunction(Tensor& output, const char* name, const std::vector<Tensor>& inputs,
                       FunctionNode::Backward backward, OpPrecision precision = OpPrecision::Compute);

// Registers fn to run once `leaf`'s gradient is final in each backward pass that reaches it
// (after accumulation into leaf.grad()). This is where data parallelism attaches.
void addGradReadyHook(Tensor& leaf, std::function<void(Tensor&)> fn);

// Lets fn take `leaf`'s gradient where it would be written over a zeroed .grad (the first one
// of a backward after nn::Module::zeroGradBeforeBackward, fp32, contiguous): fn gets the
// gradient g and returns whether it took it. A taken gradient is neither written to .grad
// (whose buffer then holds nothing of this backward; it no longer reads as zeros) nor passed to
// the ready hooks: fn stands for both, and must treat g as the bits .grad would have held,
// 0 + g (no -0). Where fn declines, .grad and the hooks proceed as usual. Data parallelism uses
// it to turn a simulated rank's gradient straight into what it sends, one pass instead of a
// write to .grad and a read back (GradientSync).
void setGradTaker(Tensor& leaf, std::function<bool(const Tensor&)> fn);

}  // namespace aps::autograd
