#pragma once

#include "framework/tensor/DType.h"
#include "framework/tensor/Storage.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace aps {

class Tensor;
namespace autograd {
class Node;
class LeafHook;
}  // namespace autograd

// Autograd bookkeeping carried by every tensor. It is plain data here so that the tensor
// library does not depend on autograd; framework/autograd reads and writes it.
struct AutogradSlots {
  bool requiresGrad = false;
  std::shared_ptr<class TensorImpl> grad;  // accumulated gradient of a leaf
  // The gradient reads as zeros though its buffer still holds the last one (nn::Module::
  // zeroGradBeforeBackward): Tensor::grad() zeros it first, and the next accumulation writes
  // 0 + g over it in one pass instead of a fill and an add.
  bool gradZeroPending = false;
  std::shared_ptr<autograd::Node> gradFn;         // the node that produced this tensor
  uint32_t outputNr = 0;                          // which output of gradFn this tensor is
  std::weak_ptr<autograd::Node> gradAccumulator;  // the leaf's unique AccumulateGrad node
  // Run where backward finishes this leaf's gradient, in order (autograd::addLeafHook).
  std::vector<std::shared_ptr<autograd::LeafHook>> leafHooks;
};

// The view (c10's TensorImpl): sizes, strides and offset in elements onto a shared Storage.
class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset,
             DType dtype)
      : storage_(std::move(storage)),
        sizes_(std::move(sizes)),
        strides_(std::move(strides)),
        offset_(offset),
        dtype_(dtype) {}

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  AutogradSlots& autograd() { return autograd_; }
  const AutogradSlots& autograd() const { return autograd_; }
  // Points this tensor, and every handle sharing it, at `moved`'s contiguous storage (same
  // sizes and dtype): how Module::to moves a parameter that layers hold by handle.
  void rebase(const TensorImpl& moved) {
    storage_ = moved.storage_;
    strides_ = moved.strides_;
    offset_ = moved.offset_;
  }

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  DType dtype_;
  AutogradSlots autograd_;
};

}  // namespace aps
