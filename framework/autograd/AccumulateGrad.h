#pragma once

#include "framework/autograd/Node.h"

namespace aps::autograd {

// The sink of a leaf tensor: adds the incoming gradient into leaf.grad (in place when a
// grad exists, so a grad that is a view into a flat bucket buffer stays one), then runs the
// leaf's gradient-ready hooks. The engine runs it once all contributions are summed, so the
// hooks see the final gradient of this backward pass. Its gradFormat() is the parameter
// format of the compute precision it was created under: in pure modes the accumulated
// gradient is rounded to it.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& gradOutputs) override;

  // The unique accumulator of a leaf that requires grad (created on first use).
  static std::shared_ptr<Node> of(const Tensor& leaf);

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace aps::autograd
