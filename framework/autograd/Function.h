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

// What runs where backward finishes a leaf's gradient, as PyTorch's post-accumulate-grad
// hooks do: data parallelism attaches here (train::GradientSync hands each gradient to the
// reducer). Hooks run in the order they were added, on the thread running backward.
class LeafHook {
 public:
  virtual ~LeafHook() = default;
  // The leaf's gradient is final for this backward: accumulated into leaf.grad().
  virtual void ready(Tensor& leaf) = 0;
  // Offered the gradient g instead of its write over a .grad that reads as zeros (the first
  // of a backward after nn::Module::zeroGradBeforeBackward; g fp32 and contiguous, the leaf's
  // gradient format fp32), and only where this is the leaf's one hook. Returns whether it
  // took g. A taken gradient is neither written to .grad (whose buffer then holds nothing of
  // this backward; it no longer reads as zeros) nor followed by ready(): the hook stands for
  // both, and must treat g as the bits .grad would have held, 0 + g (no -0). Declining (the
  // default) lets .grad and ready() proceed. Data parallelism takes a simulated rank's
  // gradient straight into what it sends: one pass instead of a write to .grad and a read back.
  virtual bool takeFirst(const Tensor& /*g*/) { return false; }
};

// Adds `hook` to `leaf` (a leaf requiring grad): it runs in each backward pass that reaches
// the leaf, after the hooks added before it.
void addLeafHook(Tensor& leaf, std::shared_ptr<LeafHook> hook);

// A LeafHook whose ready() is fn.
void addGradReadyHook(Tensor& leaf, std::function<void(Tensor&)> fn);

// Runs each of `leaf`'s hooks' ready() (the hooks of another tensor, e.g. a host mirror
// whose .grad a device gradient was copied to).
void runLeafHooks(Tensor& leaf);

}  // namespace aps::autograd
