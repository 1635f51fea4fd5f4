#pragma once

#include "framework/tensor/Tensor.h"

#include <string>
#include <vector>

namespace aps {

// A tensor with its dotted name ("layer1.0.conv1.weight"): the unit of parameter lists,
// state dicts, optimizer state and safetensors files, always kept in a fixed order.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

using NamedTensors = std::vector<NamedTensor>;

}  // namespace aps
