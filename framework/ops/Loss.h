#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

struct CrossEntropyOptions {
  float labelSmoothing = 0.0f;  // PyTorch semantics: mix the one-hot target with uniform 1/C
  int64_t ignoreIndex = -100;   // targets equal to this contribute nothing (and are not counted)
};

// Mean softmax cross-entropy over dim 1. logits (N, C) with int64 targets (N), or logits
// (N, C, H, W) with targets (N, H, W) (per-pixel, segmentation). Returns a 0-d tensor.
Tensor crossEntropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

}  // namespace aps::ops
