#pragma once

// CPU reference kernels for the heavy ops: plain float pointers, outputs first, shapes in
// comments (llm.c style). The autograd front ends in framework/ops call these; the CUDA
// kernels will share names and signatures. All tensors are contiguous NCHW float32.
// Backward kernels overwrite their outputs (they do not accumulate); a null output
// pointer means "not needed". Every kernel is deterministic for a given thread count.

#include <cstdint>

namespace aps::cpu {

struct Conv2dShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input (N, C, H, W)
  int64_t k = 1, r = 1, s = 1;         // weight (K, C/groups, R, S)
  int64_t strideH = 1, strideW = 1, padH = 0, padW = 0, dilationH = 1, dilationW = 1, groups = 1;
  int64_t outH() const { return (h + 2 * padH - dilationH * (r - 1) - 1) / strideH + 1; }
  int64_t outW() const { return (w + 2 * padW - dilationW * (s - 1) - 1) / strideW + 1; }
};

// out (N, K, P, Q) <- conv(in (N, C, H, W), weight (K, C/g, R, S)) + bias (K) [bias may be null]
void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape);
// gradIn (N, C, H, W), gradWeight (K, C/g, R, S), gradBias (K); each may be null.
void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const Conv2dShape& shape);

struct BatchNormShape {
  int64_t n = 1, c = 1, hw = 1;  // (N, C, H*W)
};
// What follows batch norm in the same pass over memory: out = relu(bn(in)) (relu), or
// relu(bn(in) + residual) (relu and a residual; a residual needs relu). The values are
// those of the separate ops in sequence (kernels/BatchNorm.h's batchNormAddRelu), bit for
// bit. reluMask (may be null) receives ReLU's mask, out > 0, reluMaskWords(hw) words per
// (n, c) plane (simd::positiveBits), which is all its backward needs of the output.
struct BatchNormEpilogue {
  const float* residual = nullptr;  // (N, C, H*W) like the input
  bool relu = false;
  uint16_t* reluMask = nullptr;
};
inline int64_t reluMaskWords(int64_t hw) { return (hw + 15) / 16; }
// reluMask <- out > 0 for a relu output out (N, C, H*W) computed elsewhere (the fused op under
// a 16-bit compute precision, whose output is rounded after the kernel).
void reluMask(uint16_t* mask, const float* out, const BatchNormShape& shape);
// Training mode: normalises with the batch statistics, saves mean and 1/sqrt(var+eps) for
// backward, and updates running stats as PyTorch does (unbiased variance, momentum).
void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps, const BatchNormEpilogue& epilogue = {});
void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps);
// The backward of a fused ReLU epilogue (reluMask not null): gradOut is the gradient of
// relu's output, reluMask the forward's mask; ReLU's input gradient, which the residual also
// receives, goes to gradResidual (may be null, or gradOut itself: masked in place). Without
// it gradOut is batch norm's own.
struct BatchNormGradEpilogue {
  const uint16_t* reluMask = nullptr;
  float* gradResidual = nullptr;
};
void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd, const BatchNormShape& shape,
                       const BatchNormGradEpilogue& epilogue = {});

struct Pool2dShape {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t kernelH = 1, kernelW = 1, strideH = 1, strideW = 1, padH = 0, padW = 0;
  int64_t outH() const { return (h + 2 * padH - kernelH) / strideH + 1; }
  int64_t outW() const { return (w + 2 * padW - kernelW) / strideW + 1; }
};
// argmax (N, C, P, Q) holds the flat h*W+w index of each maximum within its (n, c) plane.
void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape);
void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax, const Pool2dShape& shape);
void avgPool2dForward(float* out, const float* in, const Pool2dShape& shape, bool countIncludePad);
void avgPool2dBackward(float* gradIn, const float* gradOut, const Pool2dShape& shape, bool countIncludePad);

// PyTorch's adaptive average pooling bins: [floor(i*H/outH), ceil((i+1)*H/outH)).
void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                              int64_t outW);
void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                               int64_t outH, int64_t outW);

// Bilinear resize with align_corners=false, exactly as torch.nn.functional.interpolate.
void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                             int64_t outW);
void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t outH, int64_t outW);

// Row-major float32 matrix products (Gemm.cpp), one thread each.
// out (m, n) <- a (m, k) * b (k, n)
void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n);
// gradA (m, k) <- gradOut * b^T, gradB (k, n) <- a^T * gradOut; either may be null.
void matmulBackward(float* gradA, float* gradB, const float* gradOut, const float* a, const float* b, int64_t m,
                    int64_t k, int64_t n);
// out (rows, outFeatures) <- in (rows, inFeatures) * weight (outFeatures, inFeatures)^T + bias [may be null]
void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                   int64_t inFeatures, int64_t outFeatures);
// gradIn <- gradOut * weight, gradWeight <- gradOut^T * in, gradBias <- column sums of gradOut
// (each summed over the rows in order); each may be null.
void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures);

struct CrossEntropyShape {
  int64_t n = 1, c = 1, spatial = 1;  // logits (N, C, spatial); spatial = H*W for per-pixel, 1 for (N, C)
};
// Softmax cross-entropy over dim 1 with label smoothing (PyTorch semantics) and an ignore
// index; returns the mean over non-ignored targets (0 when all are ignored) and saves the
// softmax probabilities (N, C, spatial) for backward. Throws aps::Error naming the value
// when a target is outside [0, C) and not the ignore index.
float crossEntropyForward(float* probs, const float* logits, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex);
// gradLogits (N, C, spatial) <- d(gradLoss * loss)/d logits
void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, float gradLoss);

}  // namespace aps::cpu
