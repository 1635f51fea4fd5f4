#pragma once

#include "framework/tensor/Tensor.h"

#include <vector>

namespace aps::autograd {

// Runs backward from `roots` (seeded with `gradRoots`, or ones for one-element roots).
// Deterministic: a node runs once all gradients flowing into it are summed, and among
// ready nodes the latest created runs first (reverse topological order). An explicit
// worklist, no recursion, so arbitrarily deep graphs are fine.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradRoots = {});
inline void backward(const Tensor& root, const Tensor& gradRoot = Tensor()) {
  backward(std::vector<Tensor>{root}, gradRoot.defined() ? std::vector<Tensor>{gradRoot} : std::vector<Tensor>{});
}

}  // namespace aps::autograd
