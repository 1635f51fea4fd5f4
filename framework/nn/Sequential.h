#pragma once

#include "framework/nn/Module.h"

#include <memory>

namespace aps::nn {

// torch.nn.Sequential: children named "0", "1", ... in order; forward chains them.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  template <typename M>
  std::shared_ptr<M> add(std::shared_ptr<M> module) {
    return registerModule(std::to_string(size_++), std::move(module));
  }
  Tensor forward(const Tensor& input) override;
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

}  // namespace aps::nn
