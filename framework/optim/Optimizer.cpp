#include "framework/optim/Optimizer.h"

#include "framework/core/Error.h"
#include "framework/core/Profile.h"
#include "framework/numerics/FormatRounding.h"

#include <set>

namespace aps::optim {

Optimizer::Optimizer(std::string typeName, NamedTensors params, double lr)
    : typeName_(std::move(typeName)), params_(std::move(params)), lr_(lr) {
  APS_CHECK(lr >= 0.0, "{}: learning rate must be >= 0, got {}", typeName_, lr);
  std::set<std::string> names;
  for (const auto& p : params_) {
    APS_CHECK(p.tensor.defined() && p.tensor.dtype() == DType::Float32 && p.tensor.isContiguous(),
              "{}: parameter '{}' must be a contiguous float32 tensor", typeName_, p.name);
    APS_CHECK(names.insert(p.name).second, "{}: parameter name '{}' appears twice", typeName_, p.name);
  }
}

void Optimizer::step() {
  // Bytes as for SGD with momentum: parameter, gradient and momentum read, two written.
  const profile::Scope scope("optimizer", 0.0, profile::enabled() ? 20.0 * parameterCount() : 0.0);
  update();
  roundToStorageFormat(stochastic_);
}

double Optimizer::parameterCount() const {
  double count = 0.0;
  for (const auto& p : params_) count += static_cast<double>(p.tensor.numel());
  return count;
}

void Optimizer::setStorageFormat(precision::ComputeFormat format, bool stochastic, uint64_t seed) {
  storageFormat_ = format;
  stochastic_ = stochastic;
  roundingSeed_ = seed;
  roundToStorageFormat(false);  // the initial cast: nearest-even
}

void Optimizer::roundToStorageFormat(bool stochastic) {
  if (storageFormat_ == precision::ComputeFormat::Fp32) return;
  uint64_t id = 0;  // parameters in order, then state entries in key order
  auto round = [&](Tensor& t) {
    APS_ASSERT(id < (uint64_t{1} << 20));
    if (stochastic) {
      precision::roundStochasticInPlace(t, storageFormat_, roundingSeed_, static_cast<uint64_t>(steps_) << 20 | id);
    } else {
      precision::roundInPlace(t, storageFormat_);
    }
    ++id;
  };
  for (auto& p : params_) round(p.tensor);
  for (auto& [key, tensor] : state_) round(tensor);
}

void Optimizer::setLr(double lr) {
  APS_CHECK(lr >= 0.0, "{}: learning rate must be >= 0, got {}", typeName_, lr);
  lr_ = lr;
}

void Optimizer::zeroGrad(bool setToNone) {
  const profile::Scope scope("optimizer.zero_grad", 0.0, profile::enabled() ? 4.0 * parameterCount() : 0.0);
  for (auto& p : params_) {
    Tensor grad = p.tensor.grad();
    if (!grad.defined()) continue;
    if (setToNone) {
      p.tensor.setGrad(Tensor());
    } else {
      grad.zero();
    }
  }
}

Tensor& Optimizer::stateFor(const std::string& kind, size_t i) {
  const std::string key = kind + "." + params_[i].name;
  auto it = state_.find(key);
  if (it == state_.end()) {
    // State lives where its parameter does.
    it =
        state_.emplace(key, Tensor::zeros(params_[i].tensor.sizes(), DType::Float32, params_[i].tensor.device())).first;
  }
  return it->second;
}

bool Optimizer::hasState(const std::string& kind, size_t i) const {
  return state_.count(kind + "." + params_[i].name) == 1;
}

NamedTensors Optimizer::stateDict() const {
  NamedTensors out;
  Tensor steps = Tensor::zeros({}, DType::Int64);
  steps.data<int64_t>()[0] = steps_;
  out.push_back({"step", steps});
  for (const auto& [key, tensor] : state_) out.push_back({key, tensor.clone()});
  return out;
}

void Optimizer::loadStateDict(const NamedTensors& state) {
  std::map<std::string, Tensor> restored;
  bool sawStep = false;
  for (const auto& entry : state) {
    if (entry.name == "step") {
      APS_CHECK(entry.tensor.dtype() == DType::Int64 && entry.tensor.numel() == 1,
                "{}: state entry 'step' must be one int64", typeName_);
      steps_ = entry.tensor.toVector<int64_t>()[0];
      sawStep = true;
      continue;
    }
    const auto dot = entry.name.find('.');
    APS_CHECK(dot != std::string::npos, "{}: unexpected state entry '{}'", typeName_, entry.name);
    const std::string param = entry.name.substr(dot + 1);
    const NamedTensor* match = nullptr;
    for (const auto& p : params_) {
      if (p.name == param) match = &p;
    }
    APS_CHECK(match != nullptr, "{}: state entry '{}' names no parameter", typeName_, entry.name);
    APS_CHECK(entry.tensor.sizes() == match->tensor.sizes(), "{}: state entry '{}' has shape {}, parameter has {}",
              typeName_, entry.name, entry.tensor.shapeString(), match->tensor.shapeString());
    restored[entry.name] =
        entry.tensor.to(DType::Float32).to(match->tensor.device());  // state lives with its parameter
  }
  APS_CHECK(sawStep, "{}: state has no 'step' entry", typeName_);
  state_ = std::move(restored);
}

}  // namespace aps::optim
