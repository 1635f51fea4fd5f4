#include "framework/autograd/Engine.h"

#include "framework/autograd/Function.h"
#include "framework/autograd/GradAccumulation.h"
#include "framework/autograd/GradMode.h"
#include "framework/autograd/Node.h"
#include "framework/core/Error.h"
#include "framework/core/Profile.h"
#include "framework/numerics/FormatRounding.h"

#include <queue>
#include <unordered_map>

namespace aps::autograd {

using precision::roundInPlace;

namespace {

struct NodeState {
  int dependencies = 0;
  std::vector<Tensor> inputs;  // gradients for the node's forward outputs
};

void accumulate(NodeState& state, const Node& node, uint32_t slot, const Tensor& grad) {
  if (state.inputs.empty()) state.inputs.resize(node.numOutputs());
  APS_ASSERT(slot < state.inputs.size());
  Tensor& current = state.inputs[slot];
  if (!current.defined()) {
    current = grad;
    return;
  }
  // The sum goes into the gradient held here where nothing else can see it (no other tensor,
  // view or closure holds it): the same additions, without a new tensor per sum.
  if (writableInPlace(current)) {
    addInto(current, grad);
  } else {
    current = addGradients(current, grad);
  }
  roundInPlace(current, node.gradFormat());  // a sum of gradients is an op too
}

// Rounds each gradient a node produced to the format of the tensor it is the gradient of
// (ComputePrecision.h). A closure may return one tensor for several inputs (or the
// gradient it received): such a tensor is copied first when its targets' formats differ.
void roundGradients(std::vector<Tensor>& grads, const std::vector<Edge>& edges) {
  for (size_t i = 0; i < grads.size() && i < edges.size(); ++i) {
    if (!grads[i].defined() || !edges[i].valid()) continue;
    const ComputeFormat format = edges[i].fn->gradFormat();
    if (format == ComputeFormat::Fp32) continue;
    for (size_t j = 0; j < grads.size() && j < edges.size(); ++j) {
      if (j == i || !grads[j].defined() || !grads[i].sharesStorage(grads[j])) continue;
      if (!edges[j].valid() || edges[j].fn->gradFormat() != format) {
        grads[i] = grads[i].clone();
        break;
      }
    }
    roundInPlace(grads[i], format);
  }
}

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequenceNr() < b->sequenceNr(); }
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradRoots, bool retainGraph) {
  APS_CHECK(gradRoots.empty() || gradRoots.size() == roots.size(), "backward: {} roots but {} root gradients",
            roots.size(), gradRoots.size());
  // The graph: every node reachable from the roots, with its number of incoming edges.
  std::unordered_map<Node*, NodeState> states;
  std::vector<Node*> stack;
  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    APS_CHECK(root.requiresGrad(), "backward: root {} of shape {} does not require grad", i, root.shapeString());
    Tensor grad;
    if (gradRoots.empty()) {
      APS_CHECK(root.numel() == 1, "backward: root of shape {} is not a scalar; pass its gradient", root.shapeString());
      grad = Tensor::ones(root.sizes()).to(root.device());
    } else {
      grad = gradRoots[i].clone();  // closures may pass it on, and gradients are rounded in place
      APS_CHECK(grad.sizes() == root.sizes(), "backward: gradient of shape {} for a root of shape {}",
                grad.shapeString(), root.shapeString());
    }
    Edge edge = gradientEdge(root);
    if (edge.fn->roundsRootGradient()) roundInPlace(grad, edge.fn->gradFormat());
    if (states.try_emplace(edge.fn.get()).second) stack.push_back(edge.fn.get());
    seeds.emplace_back(std::move(edge), std::move(grad));
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& next : node->nextEdges()) {
      if (!next.valid()) continue;
      auto [it, inserted] = states.try_emplace(next.fn.get());
      ++it->second.dependencies;
      if (inserted) stack.push_back(next.fn.get());
    }
  }

  // Backward closures call ordinary ops; they must not record history themselves.
  NoGradGuard noGrad;
  // The engine's own work (queueing, accumulating gradients) is what its nodes and kernels
  // leave of this scope.
  const profile::Scope engineScope("autograd.engine");
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (auto& [edge, grad] : seeds) accumulate(states[edge.fn.get()], *edge.fn, edge.inputNr, grad);
  for (auto& [node, state] : states) {
    if (state.dependencies == 0) ready.push(node);
  }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    NodeState& state = states[node];
    std::vector<Tensor> inputs = std::move(state.inputs);
    inputs.resize(node->numOutputs());
    std::vector<Tensor> outputs;
    {
      const profile::Scope nodeScope(node->name().c_str());
      outputs = node->apply(std::move(inputs));
    }
    if (!retainGraph) node->releaseSaved();
    const auto& edges = node->nextEdges();
    APS_ASSERT(outputs.size() == edges.size() || outputs.empty());
    roundGradients(outputs, edges);
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      NodeState& next = states[edge.fn.get()];
      if (i < outputs.size() && outputs[i].defined()) accumulate(next, *edge.fn, edge.inputNr, outputs[i]);
      if (--next.dependencies == 0) ready.push(edge.fn.get());
    }
  }
}

}  // namespace aps::autograd
