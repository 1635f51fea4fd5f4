#include "framework/nn/Module.h"

#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"

#include <map>
#include <set>

namespace aps::nn {

Tensor Module::forward(const Tensor&) { APS_FAIL("{}: this module has no single-input forward", typeName_); }

void Module::checkNewName(const std::string& name) const {
  APS_CHECK(!name.empty() && name.find('.') == std::string::npos, "{}: invalid name '{}' (non-empty, no dots)",
            typeName_, name);
  for (const auto& p : parameters_) APS_CHECK(p.name != name, "{}: '{}' is already registered", typeName_, name);
  for (const auto& b : buffers_) APS_CHECK(b.name != name, "{}: '{}' is already registered", typeName_, name);
  for (const auto& c : children_) APS_CHECK(c.first != name, "{}: '{}' is already registered", typeName_, name);
}

Tensor Module::registerParameter(const std::string& name, Tensor tensor) {
  checkNewName(name);
  APS_CHECK(tensor.defined(), "{}: parameter '{}' is undefined", typeName_, name);
  tensor.setRequiresGrad(true);
  parameters_.push_back({name, tensor});
  return tensor;
}

Tensor Module::registerBuffer(const std::string& name, Tensor tensor) {
  checkNewName(name);
  APS_CHECK(tensor.defined(), "{}: buffer '{}' is undefined", typeName_, name);
  buffers_.push_back({name, tensor});
  return tensor;
}

void Module::addChild(const std::string& name, std::shared_ptr<Module> module) {
  checkNewName(name);
  APS_CHECK(module != nullptr, "{}: child module '{}' is null", typeName_, name);
  children_.emplace_back(name, std::move(module));
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [childName, module] : children_) {
    if (childName == name) return module;
  }
  return nullptr;
}

void Module::replaceChild(const std::string& name, std::shared_ptr<Module> module) {
  APS_CHECK(module != nullptr, "{}: replacing child module '{}' with null", typeName_, name);
  for (auto& [childName, old] : children_) {
    if (childName == name) {
      old = std::move(module);
      return;
    }
  }
  APS_FAIL("{}: no child module '{}' to replace", typeName_, name);
}

void Module::collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const {
  if (params) {
    for (const auto& p : parameters_) out.push_back({prefix + p.name, p.tensor});
  }
  if (buffers) {
    for (const auto& b : buffers_) out.push_back({prefix + b.name, b.tensor});
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, buffers, out);
}

NamedTensors Module::namedParameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : namedParameters()) out.push_back(p.tensor);
  return out;
}

NamedTensors Module::namedBuffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedTensors Module::stateDict() const {
  NamedTensors out;
  collect("", true, true, out);
  return out;
}

void Module::to(Device device) {
  autograd::NoGradGuard noGrad;
  for (auto& entry : stateDict()) {
    Tensor& t = entry.tensor;
    // Integer buffers (BatchNorm2d's num_batches_tracked) are the host's bookkeeping, which no
    // kernel reads: they stay there, so counting a step costs no device round trip.
    if (t.device() == device || t.dtype() != DType::Float32) continue;
    t.setGrad(Tensor());
    const Tensor moved = t.contiguous().to(device);
    t.impl().rebase(moved.impl());
  }
}

void Module::loadStateDict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& entry : state) given[entry.name] = &entry.tensor;
  std::set<std::string> used;
  std::vector<std::string> missing;
  autograd::NoGradGuard noGrad;
  for (auto& [name, target] : stateDict()) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& source = *it->second;
    APS_CHECK(source.sizes() == target.sizes(), "{}: '{}' has shape {} in the state but {} in the model", typeName_,
              name, source.shapeString(), target.shapeString());
    Tensor destination = target;
    destination.copyFrom(source);
    used.insert(name);
  }
  if (!strict) return;
  APS_CHECK(missing.empty(), "{}: state is missing {} entries, first '{}'", typeName_, missing.size(),
            missing.empty() ? "" : missing.front());
  for (const auto& entry : state) {
    APS_CHECK(used.count(entry.name) == 1, "{}: state has an unexpected entry '{}'", typeName_, entry.name);
  }
}

std::vector<std::pair<std::string, Module*>> Module::namedModules() {
  std::vector<std::pair<std::string, Module*>> out;
  // Pre-order walk with an explicit stack (children pushed in reverse to keep order).
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, module] = stack.back();
    stack.pop_back();
    out.emplace_back(prefix, module);
    for (auto it = module->children_.rbegin(); it != module->children_.rend(); ++it) {
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second.get());
    }
  }
  return out;
}

void Module::train(bool on) {
  for (auto& [name, module] : namedModules()) module->training_ = on;
}

void Module::zeroGradBeforeBackward() {
  for (auto& p : namedParameters()) {
    auto& slots = p.tensor.impl().autograd();
    if (slots.grad) slots.gradZeroPending = true;
  }
}

void Module::zeroGrad(bool setToNone) {
  for (auto& p : namedParameters()) {
    Tensor grad = p.tensor.grad();
    if (!grad.defined()) continue;
    if (setToNone) {
      p.tensor.setGrad(Tensor());
    } else {
      grad.zero();
    }
  }
}

}  // namespace aps::nn
