// The optimizer updates of framework/optim/cuda/Updates.h on the emulated device
// (APS_CUDA_EMULATION=ON), built instead of Updates.cu: the same shared per-element updates
// and norm blocks (framework/optim/kernels/Updates.h), queued on the stream's thread over the
// device memory's host view.
#include "framework/optim/cuda/Updates.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"

#include <cmath>

namespace aps::optim::cuda {

using aps::cuda::emu::view;
namespace emu = aps::cuda::emu;

void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, const kernels::SgdParams& o,
               StreamHandle stream) {
  if (n <= 0) return;
  view(param, n), view(grad, n), view(buf, n);
  emu::enqueue(stream, [=] {
    float* p = view(param, n);
    const float* g = view(grad, n);
    float* b = view(buf, n);
    for (int64_t i = 0; i < n; ++i) kernels::sgdUpdate(p[i], g[i], b != nullptr ? b + i : nullptr, o);
  });
}

void larsUpdate(float* param, const float* grad, float* velocity, int64_t n, float momentum, float scaledLr,
                float weightDecay, StreamHandle stream) {
  if (n <= 0) return;
  view(param, n), view(grad, n), view(velocity, n);
  emu::enqueue(stream, [=] {
    float *p = view(param, n), *v = view(velocity, n);
    const float* g = view(grad, n);
    for (int64_t i = 0; i < n; ++i) kernels::larsUpdate(p[i], g[i], v[i], momentum, scaledLr, weightDecay);
  });
}

void adamWUpdate(float* param, const float* grad, float* expAvg, float* expAvgSq, int64_t n,
                 const kernels::AdamWParams& o, StreamHandle stream) {
  if (n <= 0) return;
  view(param, n), view(grad, n), view(expAvg, n), view(expAvgSq, n);
  emu::enqueue(stream, [=] {
    float *p = view(param, n), *m = view(expAvg, n), *v = view(expAvgSq, n);
    const float* g = view(grad, n);
    for (int64_t i = 0; i < n; ++i) kernels::adamWUpdate(p[i], g[i], m[i], v[i], o);
  });
}

double l2Norm(const float* x, int64_t n, StreamHandle stream) {
  if (n <= 0) return 0.0;
  view(x, n);
  return emu::runAndWait(stream, [=] {
    const int64_t blocks = (n + kernels::kNormBlock - 1) / kernels::kNormBlock;
    double total = 0.0;
    for (int64_t b = 0; b < blocks; ++b) total += kernels::squaredNormBlock(view(x, n), n, b);
    return std::sqrt(total);
  });
}

}  // namespace aps::optim::cuda
