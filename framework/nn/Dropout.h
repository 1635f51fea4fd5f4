#pragma once

#include "framework/nn/Module.h"

#include <cstdint>

namespace aps::nn {

// torch.nn.Dropout with a reproducible mask: the k-th forward in training mode uses
// Philox stream k under `seed`. setNextStream() restores the position
// after a resume (e.g. to the global step).
class Dropout : public Module {
 public:
  explicit Dropout(float p, uint64_t seed = 0) : Module("Dropout"), p_(p), seed_(seed) {}
  Tensor forward(const Tensor& input) override;
  void setNextStream(uint64_t stream) { nextStream_ = stream; }
  uint64_t nextStream() const { return nextStream_; }

 private:
  float p_;
  uint64_t seed_;
  uint64_t nextStream_ = 0;
};

}  // namespace aps::nn
