// The 16-bit roundings of framework/numerics/cuda/RoundingKernels.h on the emulated device
// (APS_CUDA_EMULATION=ON): the same per-element functions in host loops on the stream's
// thread, over the device memory's host view.
#include "framework/core/Philox.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/numerics/cuda/RoundingKernels.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"

namespace aps::precision::cuda {

namespace emu = aps::cuda::emu;

void roundToComputeFormat(float* data, int64_t n, ComputeFormat format, void* stream) {
  if (format == ComputeFormat::Fp32 || n <= 0) return;
  emu::view(data, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [data, n, format] {
    float* x = emu::view(data, n);
    const auto round = format == ComputeFormat::Fp16 ? kernels::roundFp16 : kernels::roundBf16;
    for (int64_t i = 0; i < n; ++i) x[i] = round(x[i]);
  });
}

void roundStochasticToComputeFormat(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream,
                                    void* cudaStream) {
  if (format == ComputeFormat::Fp32 || n <= 0) return;
  emu::view(data, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(cudaStream), [data, n, format, seed, stream] {
    float* x = emu::view(data, n);
    const kernels::RoundingParams p = kernels::sixteenBitParams(format);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = kernels::roundValue(x[i], RoundingMode::Stochastic, randomBits32(seed, stream, static_cast<uint64_t>(i)), p);
    }
  });
}

}  // namespace aps::precision::cuda
