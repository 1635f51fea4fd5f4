#include "framework/tensor/Stateful.h"

#include "framework/core/Error.h"

namespace aps {

std::vector<int64_t> int64Entry(const NamedTensors& state, const std::string& name) {
  const Tensor* t = findTensor(state, name);
  APS_CHECK(t != nullptr, "no '{}'", name);
  APS_CHECK(t->dtype() == DType::Int64, "'{}' is {}, not int64", name, dtypeName(t->dtype()));
  const Tensor c = t->contiguous();
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}

NamedTensors withoutPrefix(const NamedTensors& state, const std::string& prefix) {
  NamedTensors out;
  const std::string p = prefix + ".";
  for (const auto& entry : state) {
    if (entry.name.compare(0, p.size(), p) == 0) out.push_back({entry.name.substr(p.size()), entry.tensor});
  }
  return out;
}

}  // namespace aps
