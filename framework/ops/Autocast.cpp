#include "framework/ops/Autocast.h"

#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Function.h"

namespace aps::ops {

Tensor autocastInput(const Tensor& t) {
  const autograd::ComputePrecision current = autograd::ComputePrecision::current();
  if (current.isFp32() || !t.defined() || t.dtype() != DType::Float32) return t;
  if (autograd::formatOf(t) == current.format()) return t;
  Tensor copy = t.clone();  // recordFunction rounds it: the cast
  return autograd::recordFunction(copy, "AutocastBackward", {t},
                                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

}  // namespace aps::ops
