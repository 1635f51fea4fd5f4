#pragma once

#include "framework/tensor/Tensor.h"

#include <vector>

namespace aps::autograd {

// Runs backward from `roots` (seeded with `gradRoots`, or ones for one-element roots).
// Deterministic: a node runs once all gradients flowing into it are summed, and among
// ready nodes the latest created runs first (reverse topological order). An explicit
// worklist, no recursion, so arbitrarily deep graphs are fine. Unless retainGraph, each
// node's saved tensors are released as soon as it has run (peak memory falls during
// backward); a second backward through the same graph then throws.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradRoots = {}, bool retainGraph = false);
inline void backward(const Tensor& root, const Tensor& gradRoot = Tensor(), bool retainGraph = false) {
  backward(std::vector<Tensor>{root}, gradRoot.defined() ? std::vector<Tensor>{gradRoot} : std::vector<Tensor>{},
           retainGraph);
}

}  // namespace aps::autograd
