#include "framework/ops/Loss.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

Tensor crossEntropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o) {
  checkFloat("crossEntropy", "logits", logits);
  APS_CHECK(targets.defined(), "crossEntropy: targets are undefined");
  APS_CHECK(targets.dtype() == DType::Int64, "crossEntropy: targets must be int64 class indices, got {} (shape {})",
            dtypeName(targets.dtype()), targets.shapeString());
  APS_CHECK(logits.dim() == 2 || logits.dim() == 4, "crossEntropy: logits must be (N, C) or (N, C, H, W), got {}",
            logits.shapeString());
  APS_CHECK(o.labelSmoothing >= 0.0f && o.labelSmoothing <= 1.0f,
            "crossEntropy: label smoothing must be in [0, 1], got {}", o.labelSmoothing);
  Shape expected{logits.size(0)};
  if (logits.dim() == 4) {
    expected.push_back(logits.size(2));
    expected.push_back(logits.size(3));
  }
  APS_CHECK(targets.sizes() == expected, "crossEntropy: targets shape {} does not match logits shape {} (expected {})",
            targets.shapeString(), logits.shapeString(), formatShape(expected));
  cpu::CrossEntropyShape s;
  s.n = logits.size(0);
  s.c = logits.size(1);
  s.spatial = logits.dim() == 4 ? logits.size(2) * logits.size(3) : 1;
  APS_CHECK(s.c >= 1, "crossEntropy: logits shape {} has no classes", logits.shapeString());
  const Backend& backend = backendFor("crossEntropy", {&logits, &targets});
  const Tensor cl = logits.contiguous();
  const Tensor ct = targets.contiguous().clone();  // saved for backward; the caller may reuse its buffer
  Tensor probs = Tensor::empty(cl.sizes(), DType::Float32, cl.device());
  const float loss = backend.crossEntropyForward(probs.data<float>(), cl.data<float>(), ct.data<int64_t>(), s,
                                              o.labelSmoothing, o.ignoreIndex);
  // The loss lives where the logits do (a GPU's crossEntropyForward returns it to the host).
  Tensor out = Tensor::scalar(loss).to(cl.device());
  return autograd::recordFunction(
      out, "CrossEntropyBackward", {logits},
      [=, &backend](const Tensor& g) {
        Tensor gx = Tensor::empty(probs.sizes(), DType::Float32, probs.device());
        backend.crossEntropyBackward(gx.data<float>(), probs.data<float>(), ct.data<int64_t>(), s, o.labelSmoothing,
                                  o.ignoreIndex, g.item());
        return std::vector<Tensor>{gx};
      },
      autograd::OpPrecision::Fp32WhenMixed);  // autocast runs losses in fp32
}

}  // namespace aps::ops
