#pragma once

#include "framework/tensor/Tensor.h"

#include <string>
#include <string_view>
#include <vector>

namespace aps {

// A tensor with its dotted name ("layer1.0.conv1.weight"): the unit of parameter lists,
// state dicts, optimizer state and safetensors files, always kept in a fixed order.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

using NamedTensors = std::vector<NamedTensor>;

// The tensor named `name` in `tensors` (the first, if several), or nullptr: how state dicts
// and checkpoint sections are looked up.
inline const Tensor* findTensor(const NamedTensors& tensors, std::string_view name) {
  for (const auto& entry : tensors) {
    if (entry.name == name) return &entry.tensor;
  }
  return nullptr;
}

// The tensors on `device`: copies, or the tensors themselves where already there (a state dict
// of a model on a GPU written to a file from host copies).
inline NamedTensors onDevice(NamedTensors tensors, Device device) {
  for (auto& entry : tensors) entry.tensor = entry.tensor.to(device);
  return tensors;
}

}  // namespace aps
