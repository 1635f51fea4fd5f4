#pragma once

#include "framework/core/EnumNames.h"
#include "framework/numerics/ComputeFormat.h"
#include "framework/tensor/Tensor.h"

#include <cstdint>
#include <string_view>

namespace aps::autograd {

// The formats and their rounding are precision's (framework/numerics/ComputeFormat.h,
// framework/numerics/FormatRounding.h); autograd applies them to op outputs and gradients.
using precision::ComputeFormat;

// precision.compute: the arithmetic training emulates on the CPU (docs/ALGORITHMS.md, 16-bit training:
// Cheng et al., arXiv 1911.07384, and the mixed precision it is compared with).
//
// While a ComputePrecisionGuard with a 16-bit mode is active on a thread, one mechanism
// rounds values to the format, round-to-nearest-even, after every operation:
// - every op's forward output is rounded in place when the op records it
//   (autograd::recordFunction), so activations hold format values;
// - the engine rounds every gradient a backward node produces to the format of the tensor
//   it is the gradient of (each node remembers the format of its output), and every sum of
//   gradient contributions; the root gradient (the loss scale) is never rounded, except
//   where it enters a node that fuses an op whose gradient would be rounded inside it
//   (Node::roundsRootGradient: ops::batchNorm2dRelu's ReLU), so that the fused op computes
//   what the separate ops would;
// - fp16_mixed / bf16_mixed (Micikevicius et al., "Mixed Precision Training", ICLR 2018;
//   torch.autocast): parameters stay fp32 master weights. The ops autocast runs in 16 bits
//   (conv2d, linear, matmul) read rounded copies of float inputs that are not yet format
//   values (ops::autocastInput, a differentiable cast); the gradient the cast receives is a
//   format value, added in fp32 into the master's .grad (leaf gradients are not rounded).
//   Cross entropy runs in fp32 (autocast's fp32 list: OpPrecision::Fp32WhenMixed). Batch
//   norm computes in fp32 with the fp32 gamma and beta, as cuDNN does under autocast: its
//   output and input gradient are rounded, its gamma/beta gradients are fp32.
// - fp16_pure / bf16_pure: no fp32 copy anywhere. Parameters are format values (the
//   optimizer rounds parameters and its state after every update:
//   optim::Optimizer::setStorageFormat), leaf gradients are rounded after accumulation, and
//   batch norm's gamma/beta are 16-bit like every parameter. Choice for batch norm in pure
//   mode: the per-batch mean and variance are accumulated in fp32 inside the op (as cuDNN
//   does for half inputs) and the running statistics buffers stay fp32 (they are neither
//   weights nor optimizer state, and an 8-bit-mantissa running average with momentum 0.1
//   stalls); its output and all its gradients are rounded.
// Inside one op, accumulation (a convolution's or GEMM's dot products, a reduction's sum)
// is fp32, as on tensor cores; only the op's results are rounded.
class ComputePrecision {
 public:
  enum class Mode : uint8_t { Fp32, Fp16Mixed, Fp16Pure, Bf16Mixed, Bf16Pure };

  constexpr ComputePrecision() = default;
  constexpr explicit ComputePrecision(Mode mode) : mode_(mode) {}
  // "fp32", "fp16_mixed", "fp16_pure", "bf16_mixed", "bf16_pure"; throws aps::Error naming
  // the value otherwise.
  static ComputePrecision parse(std::string_view name);
  static const EnumNames<Mode, 5>& names();

  Mode mode() const { return mode_; }
  const char* name() const;
  // The 16-bit format ops compute in (Fp32 for fp32).
  ComputeFormat format() const;
  bool isFp32() const { return mode_ == Mode::Fp32; }
  bool isMixed() const { return mode_ == Mode::Fp16Mixed || mode_ == Mode::Bf16Mixed; }
  bool isPure() const { return mode_ == Mode::Fp16Pure || mode_ == Mode::Bf16Pure; }
  // The format of parameters and their gradients: fp32 master weights unless pure.
  ComputeFormat parameterFormat() const { return isPure() ? format() : ComputeFormat::Fp32; }

  // This thread's setting: fp32 unless a guard is active (per thread, like GradMode).
  static ComputePrecision current();

  bool operator==(const ComputePrecision&) const = default;

 private:
  Mode mode_ = Mode::Fp32;
};

// Sets this thread's compute precision for its lifetime (the autocast region). Nodes
// recorded inside remember their formats, so backward() may run after the guard is gone.
class ComputePrecisionGuard {
 public:
  explicit ComputePrecisionGuard(ComputePrecision precision);
  ~ComputePrecisionGuard();
  ComputePrecisionGuard(const ComputePrecisionGuard&) = delete;
  ComputePrecisionGuard& operator=(const ComputePrecisionGuard&) = delete;

 private:
  ComputePrecision previous_;
};

// How autocast treats an op (PyTorch's autocast op lists).
enum class OpPrecision : uint8_t {
  Compute,        // runs in the compute format: its output is rounded in every 16-bit mode
  Fp32WhenMixed,  // autocast's fp32 list (losses): fp32 output in mixed modes, rounded in pure
};

// The format t's values are known to hold under the current precision: that of the node
// that produced it, the parameter format for a leaf that requires grad, else Fp32 (data,
// or outputs computed without history).
ComputeFormat formatOf(const Tensor& t);

}  // namespace aps::autograd
