#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"
#include "framework/tensor/Tensor.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace aps::nn {

// A layer or network (torch.nn.Module): named parameters, buffers and child modules in
// registration order, so that dotted names ("layer1.0.conv1.weight") and their order are
// identical on every rank and match torchvision's state_dict for the same architecture.
class Module : public Stateful {
 public:
  explicit Module(std::string typeName) : typeName_(std::move(typeName)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-input forward; modules with other signatures add their own methods.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  const std::string& typeName() const { return typeName_; }

  // Recursive, pre-order: own entries first, then each child's with "child." prefixed.
  NamedTensors namedParameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors namedBuffers() const;
  // Per module: parameters, then buffers, then children (torch's state_dict order).
  NamedTensors stateDict() const override;
  // Copies values into the registered tensors (shapes must match; dtypes are converted).
  // strict: every key must be present and no unknown key may appear.
  void loadStateDict(const NamedTensors& state, bool strict);
  void loadStateDict(const NamedTensors& state) override { loadStateDict(state, true); }
  std::vector<std::pair<std::string, Module*>> namedModules();  // includes this one as ""
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> namedChildren() const { return children_; }
  // The child registered as `name` (null: none).
  std::shared_ptr<Module> child(const std::string& name) const;
  // Puts `module` in the place of child `name`, same name and position (model parallelism
  // swaps a layer for its split form). A model's forward reaches its replaceable children
  // through child() or namedChildren(), never a pointer of its own.
  void replaceChild(const std::string& name, std::shared_ptr<Module> module);

  // Moves every float parameter and buffer to `device` in place (torch's Module.to): the
  // layers' handles follow, gradients are dropped; integer buffers (step counters) stay on
  // the host. An optimizer is made after the move.
  void to(Device device);

  void train(bool on = true);
  void eval() { train(false); }
  bool isTraining() const { return training_; }
  // Zeroes every parameter's gradient in place (gradients that are views into flat bucket
  // buffers stay views); setToNone drops them instead.
  void zeroGrad(bool setToNone = false);
  // zeroGrad for a backward that follows at once (the simulator's next rank on a model copy):
  // each gradient reads as zeros through Tensor::grad(), and backward's first accumulation
  // writes 0 + g over the old values (the bits of zeroing then adding) in one pass. A tensor
  // or buffer taken from grad() before this call keeps the old values until then.
  void zeroGradBeforeBackward();

  // Registration (normally called by constructors, in a fixed order).
  Tensor registerParameter(const std::string& name, Tensor tensor);
  Tensor registerBuffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> registerModule(const std::string& name, std::shared_ptr<M> module) {
    addChild(name, module);
    return module;
  }

 private:
  void addChild(const std::string& name, std::shared_ptr<Module> module);
  void checkNewName(const std::string& name) const;
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;

  std::string typeName_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace aps::nn
