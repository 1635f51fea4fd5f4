#include "framework/ops/Upsample.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

Tensor upsampleBilinear(const Tensor& x, int64_t outH, int64_t outW) {
  checkFloat("upsampleBilinear", "input", x);
  checkRank("upsampleBilinear", "input", x, 4);
  APS_CHECK(outH >= 1 && outW >= 1, "upsampleBilinear: output size must be >= 1, got ({}, {})", outH, outW);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  APS_CHECK(h >= 1 && w >= 1, "upsampleBilinear: input shape {} is empty", x.shapeString());
  const Backend& backend = backendFor("upsampleBilinear", {&x});
  const Tensor cx = x.contiguous();
  Tensor out = Tensor::empty({n, c, outH, outW}, DType::Float32, x.device());
  backend.upsampleBilinearForward(out.data<float>(), cx.data<float>(), n, c, h, w, outH, outW);
  return autograd::recordFunction(out, "UpsampleBilinearBackward", {x}, [=, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    Tensor gx = Tensor::empty({n, c, h, w}, DType::Float32, g.device());
    backend.upsampleBilinearBackward(gx.data<float>(), g.data<float>(), n, c, h, w, outH, outW);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace aps::ops
