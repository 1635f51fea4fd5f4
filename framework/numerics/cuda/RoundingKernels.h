#pragma once

// The compute emulation's 16-bit roundings on the device (framework/numerics/FormatRounding.h's
// roundInPlace and roundStochasticInPlace for a cuda tensor): the CPU's per-element functions
// (framework/numerics/FloatRounding.h) as kernels, so device and CPU give the same bits. Built
// as CUDA, as host loops on the emulated device, or as throwing stubs without CUDA.
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>

namespace aps::precision::cuda {

// data[i] = kernels::roundFp16 / roundBf16 (data[i]), in place; Fp32 queues nothing.
void roundToComputeFormat(float* data, int64_t n, ComputeFormat format, void* stream);

// data[i] rounded stochastically to `format` with randomBits32(seed, stream, i), in place, as
// the CPU's roundStochastic; Fp32 queues nothing.
void roundStochasticToComputeFormat(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream,
                                    void* cudaStream);

}  // namespace aps::precision::cuda
