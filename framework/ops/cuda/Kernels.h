#pragma once

// CUDA kernels for the ops of framework/ops/cpu/Kernels.h, with the same names, argument
// order and shapes, plus the element-wise ops. Every pointer is a device pointer; the last
// argument is the stream to launch on (null: the default stream). The arithmetic is the
// shared kernels/*.h functions the CPU kernels call, so a result differs from the CPU's only
// where stated:
//   - element-wise ops, batch norm (statistics too: the same lane order as the CPU),
//     pooling, upsampling, cross-entropy backward: the CPU's bits;
//   - cross-entropy forward: expf and log differ from glibc's in the last bits, and the mean
//     is a fixed-order tree sum of the per-position losses (double), not the CPU's
//     image-by-image sum; both are deterministic run to run.
// Backward kernels gather instead of scatter (one thread per input element, adding the
// contributions in the CPU's order), so none uses atomics on floats.
// Shapes are not validated here: the front ends check them before choosing a device.
// This header includes no CUDA header, so plain C++ can call these functions.

#include "framework/ops/cpu/Kernels.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>

namespace aps::cuda {

using cpu::BatchNormShape;
using cpu::CrossEntropyShape;
using cpu::Pool2dShape;

// Element-wise ops over n contiguous floats (out may alias an input).
void add(float* out, const float* a, const float* b, int64_t n, StreamHandle stream = nullptr);
void sub(float* out, const float* a, const float* b, int64_t n, StreamHandle stream = nullptr);
void mul(float* out, const float* a, const float* b, int64_t n, StreamHandle stream = nullptr);
void scale(float* out, const float* x, float s, int64_t n, StreamHandle stream = nullptr);
void addScalar(float* out, const float* x, float s, int64_t n, StreamHandle stream = nullptr);
void relu(float* out, const float* x, int64_t n, StreamHandle stream = nullptr);
// gradIn <- grad where y > 0, else 0 (y: relu's output).
void reluBackward(float* gradIn, const float* grad, const float* y, int64_t n, StreamHandle stream = nullptr);

void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps, StreamHandle stream = nullptr);
void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps,
                          StreamHandle stream = nullptr);
void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd, const BatchNormShape& shape,
                       StreamHandle stream = nullptr);

void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape,
                      StreamHandle stream = nullptr);
void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax, const Pool2dShape& shape,
                       StreamHandle stream = nullptr);
void avgPool2dForward(float* out, const float* in, const Pool2dShape& shape, bool countIncludePad,
                      StreamHandle stream = nullptr);
void avgPool2dBackward(float* gradIn, const float* gradOut, const Pool2dShape& shape, bool countIncludePad,
                       StreamHandle stream = nullptr);
void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                              int64_t outW, StreamHandle stream = nullptr);
void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                               int64_t outH, int64_t outW, StreamHandle stream = nullptr);

void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                             int64_t outW, StreamHandle stream = nullptr);
void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t outH, int64_t outW, StreamHandle stream = nullptr);

// Returns the mean loss to the host, so it waits for the stream. Throws aps::Error naming the
// first (lowest) position whose target is outside [0, C) and not the ignore index.
float crossEntropyForward(float* probs, const float* logits, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, StreamHandle stream = nullptr);
// Does not wait for the stream; the targets are the ones crossEntropyForward checked (an
// invalid one gets a zero gradient rather than an error).
void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, float gradLoss, StreamHandle stream = nullptr);

// The 16-bit paths of the cuDNN and cuBLAS wrappers (precision.compute on a GPU): n float32
// values that are already values of `format` (fp16 or bf16) to its 2-byte storage and back,
// exactly (nearest-even, should one not be).
void toSixteenBit(void* out, const float* in, int64_t n, precision::ComputeFormat format,
                  StreamHandle stream = nullptr);
void fromSixteenBit(float* out, const void* in, int64_t n, precision::ComputeFormat format,
                    StreamHandle stream = nullptr);

}  // namespace aps::cuda
