#include "framework/ops/Dropout.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/core/Rng.h"
#include "framework/ops/Checks.h"
#include "framework/ops/Elementwise.h"

namespace aps::ops {

Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream) {
  checkFloat("dropout", "input", x);
  APS_CHECK(p >= 0.0f && p <= 1.0f, "dropout: probability must be in [0, 1], got {}", p);
  if (!training || p == 0.0f) return x;
  // The mask holds the scale applied to each element: 0 or 1/(1-p).
  Tensor mask = Tensor::empty(x.sizes());
  float* m = mask.data<float>();
  const float keepScale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  parallelFor(mask.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float u = static_cast<float>(randomBits32(seed, stream, static_cast<uint64_t>(i)) >> 8) * 0x1.0p-24f;
      m[i] = u < p ? 0.0f : keepScale;
    }
  });
  // The mask is drawn on the host (its bits do not depend on the device) and used where x is.
  if (!x.device().isCpu()) mask = mask.to(x.device());
  Tensor out;
  {
    Tensor input = x.detach();
    out = mul(input, mask);
  }
  return autograd::recordFunction(out, "DropoutBackward", {x},
                                  [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
}

}  // namespace aps::ops
