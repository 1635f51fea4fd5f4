#pragma once

#include "framework/tensor/Tensor.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace aps::autograd {

using precision::ComputeFormat;  // the 16-bit formats are precision's (framework/numerics/ComputeFormat.h)

class Node;

// Where a gradient flows: input slot `inputNr` of node `fn` (the slot is the producing
// tensor's output number). An edge without a node carries nothing.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t inputNr = 0;
  bool valid() const { return fn != nullptr; }
};

// A backward function in the dynamic graph. apply() receives one gradient per forward output
// (numOutputs(); an undefined tensor when none arrived) and returns one gradient per next
// edge (undefined when that input needs none).
class Node {
 public:
  explicit Node(std::string name, uint32_t numOutputs = 1);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::vector<Tensor> apply(std::vector<Tensor>&& gradOutputs) = 0;
  // Drops what apply() needs (saved activations) once backward has run through this node
  // without retainGraph, so activations are freed during backward, not after it.
  virtual void releaseSaved() {}

  const std::string& name() const { return name_; }
  uint32_t numOutputs() const { return numOutputs_; }
  // Creation order; the engine runs ready nodes latest-created first (reverse topological).
  uint64_t sequenceNr() const { return sequenceNr_; }
  const std::vector<Edge>& nextEdges() const { return next_; }
  void addNextEdge(Edge edge) { next_.push_back(std::move(edge)); }
  // The format of the tensor this node produced (ComputePrecision.h): the engine rounds the
  // gradients flowing into this node to it. Fp32 (no rounding) unless set.
  ComputeFormat gradFormat() const { return gradFormat_; }
  void setGradFormat(ComputeFormat format) { gradFormat_ = format; }
  // A node that fuses an op whose gradient the engine would round inside it (the ReLU of
  // ops::batchNorm2dRelu) asks for a root gradient seeded into it to be rounded to
  // gradFormat() too; every other gradient reaching a node already is.
  bool roundsRootGradient() const { return roundsRootGradient_; }
  void setRoundsRootGradient() { roundsRootGradient_ = true; }

 private:
  std::string name_;
  uint32_t numOutputs_;
  uint64_t sequenceNr_;
  std::vector<Edge> next_;
  ComputeFormat gradFormat_ = ComputeFormat::Fp32;
  bool roundsRootGradient_ = false;
};

}  // namespace aps::autograd
