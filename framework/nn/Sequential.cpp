#include "framework/nn/Sequential.h"

namespace aps::nn {

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (auto& [name, child] : namedChildren()) x = child->forward(x);
  return x;
}

}  // namespace aps::nn
