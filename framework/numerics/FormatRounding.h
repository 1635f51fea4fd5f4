#pragma once

#include "framework/tensor/Tensor.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>

namespace aps::precision {

// Rounding of float32 values to a ComputeFormat, exactly, for the compute-precision
// emulation (ComputePrecision.h). Nearest-even is IEEE 754 roundTiesToEven with the
// format's overflow to inf (fp16: |x| >= 65520 becomes inf) and NaN kept (quiet); it
// matches the storage conversions of framework/tensor/HalfFloat.h bit for bit but runs as
// branch-free float arithmetic that the compiler vectorises (it is on every op's output).
float roundNearestEven(float x, ComputeFormat format);
void roundNearestEven(float* data, int64_t n, ComputeFormat format);  // in place, parallel

// Stochastic rounding (Gupta et al., "Deep learning with limited numerical precision",
// ICML 2015): x goes to the neighbour above with probability (x - lo) / (hi - lo), so
// E[Q(x)] = x. Element i draws randomBits32(seed, stream, i) (framework/core/Rng.h), so the
// result is reproducible and independent of the thread count. Finite values above the
// largest finite value become inf, as with nearest-even. This is the wire codec's routine
// (Quantizer with the fp16/bf16 format and RoundingMode::Stochastic): the neighbour above
// is taken when the fraction plus the random bits carries out of 32 bits.
float roundStochastic(float x, ComputeFormat format, uint32_t randomBits);
void roundStochastic(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream);

// Round a float32 tensor (any view, on any device) in place; Fp32 leaves it unchanged. On a
// GPU the same per-element functions run as device kernels, so the bits are the CPU's.
void roundInPlace(Tensor& t, ComputeFormat format);
void roundStochasticInPlace(Tensor& t, ComputeFormat format, uint64_t seed, uint64_t stream);

// Whether x is a value of the format (inf and NaN count as representable).
bool isRepresentable(float x, ComputeFormat format);
// The number of elements of a float32 tensor that are not values of the format (tests, checks).
int64_t countNotRepresentable(const Tensor& t, ComputeFormat format);

}  // namespace aps::precision
