// The CUDA table of framework/ops/Backend.h: the CUDA kernels (Kernels.h), cuDNN (CudnnConv.h)
// and cuBLAS (CublasGemm.h) on the legacy default stream, which orders every kernel and copy
// of a step. The object library aps_cuda_backend (with a CUDA backend, real or emulated):
// a program that links it has the table registered before main.
#include "framework/ops/Backend.h"

#include "framework/autograd/ComputePrecision.h"
#include "framework/core/Error.h"
#include "framework/ops/cuda/CublasGemm.h"
#include "framework/ops/cuda/CudnnConv.h"
#include "framework/ops/cuda/Kernels.h"

namespace aps::ops {

namespace {

constexpr cuda::StreamHandle kStream = nullptr;

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void binary(BinaryOp op, float* out, const float* a, const float* b, int64_t n) const override {
    switch (op) {
      case BinaryOp::Add:
        return cuda::add(out, a, b, n, kStream);
      case BinaryOp::Sub:
        return cuda::sub(out, a, b, n, kStream);
      case BinaryOp::Mul:
        return cuda::mul(out, a, b, n, kStream);
      case BinaryOp::ReluBackward:
        return cuda::reluBackward(out, a, b, n, kStream);
    }
  }

  void unary(UnaryOp op, float* out, const float* x, float s, int64_t n) const override {
    switch (op) {
      case UnaryOp::Scale:
        return cuda::scale(out, x, s, n, kStream);
      case UnaryOp::AddScalar:
        return cuda::addScalar(out, x, s, n, kStream);
      case UnaryOp::Relu:
        return cuda::relu(out, x, n, kStream);
    }
  }

  void conv2dForward(float* out, const float* in, const float* weight, const float* bias,
                     const cpu::Conv2dShape& shape) const override {
    // A biased convolution stays float32, so that its bias is added before the one rounding.
    cuda::conv2dForward(out, in, weight, bias, shape, convOptions(bias == nullptr), kStream);
  }
  void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                      const float* weight, const cpu::Conv2dShape& shape) const override {
    cuda::conv2dBackward(gradIn, gradWeight, gradBias, gradOut, in, weight, shape, convOptions(true), kStream);
  }

  bool fusedBatchNorm() const override { return false; }
  void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                             const float* in, const float* gamma, const float* beta, const cpu::BatchNormShape& shape,
                             float momentum, float eps, const cpu::BatchNormEpilogue& epilogue) const override {
    APS_CHECK(epilogue.residual == nullptr && !epilogue.relu && epilogue.reluMask == nullptr,
              "batchNorm2d on cuda: no fused epilogue (the front end runs ReLU and the add as their own ops)");
    cuda::batchNormForwardTrain(out, saveMean, saveInvStd, runningMean, runningVar, in, gamma, beta, shape, momentum,
                                eps, kStream);
  }
  void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta,
                            const float* runningMean, const float* runningVar, const cpu::BatchNormShape& shape,
                            float eps) const override {
    cuda::batchNormForwardEval(out, in, gamma, beta, runningMean, runningVar, shape, eps, kStream);
  }
  void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                         const float* gamma, const float* saveMean, const float* saveInvStd,
                         const cpu::BatchNormShape& shape, const cpu::BatchNormGradEpilogue& epilogue) const override {
    APS_CHECK(epilogue.reluMask == nullptr && epilogue.gradResidual == nullptr,
              "batchNorm2d backward on cuda: no fused epilogue");
    cuda::batchNormBackward(gradIn, gradGamma, gradBeta, gradOut, in, gamma, saveMean, saveInvStd, shape, kStream);
  }

  void maxPool2dForward(float* out, int64_t* argmax, const float* in, const cpu::Pool2dShape& shape) const override {
    cuda::maxPool2dForward(out, argmax, in, shape, kStream);
  }
  void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax,
                         const cpu::Pool2dShape& shape) const override {
    cuda::maxPool2dBackward(gradIn, gradOut, argmax, shape, kStream);
  }
  void avgPool2dForward(float* out, const float* in, const cpu::Pool2dShape& shape,
                        bool countIncludePad) const override {
    cuda::avgPool2dForward(out, in, shape, countIncludePad, kStream);
  }
  void avgPool2dBackward(float* gradIn, const float* gradOut, const cpu::Pool2dShape& shape,
                         bool countIncludePad) const override {
    cuda::avgPool2dBackward(gradIn, gradOut, shape, countIncludePad, kStream);
  }
  void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                                int64_t outW) const override {
    cuda::adaptiveAvgPool2dForward(out, in, n, c, h, w, outH, outW, kStream);
  }
  void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t outH, int64_t outW) const override {
    cuda::adaptiveAvgPool2dBackward(gradIn, gradOut, n, c, h, w, outH, outW, kStream);
  }
  void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                               int64_t outW) const override {
    cuda::upsampleBilinearForward(out, in, n, c, h, w, outH, outW, kStream);
  }
  void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                                int64_t outH, int64_t outW) const override {
    cuda::upsampleBilinearBackward(gradIn, gradOut, n, c, h, w, outH, outW, kStream);
  }

  float crossEntropyForward(float* probs, const float* logits, const int64_t* targets,
                            const cpu::CrossEntropyShape& shape, float labelSmoothing,
                            int64_t ignoreIndex) const override {
    return cuda::crossEntropyForward(probs, logits, targets, shape, labelSmoothing, ignoreIndex, kStream);
  }
  void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets,
                            const cpu::CrossEntropyShape& shape, float labelSmoothing, int64_t ignoreIndex,
                            float gradLoss) const override {
    cuda::crossEntropyBackward(gradLogits, probs, targets, shape, labelSmoothing, ignoreIndex, gradLoss, kStream);
  }

  void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                     int64_t inFeatures, int64_t outFeatures) const override {
    cuda::linearForward(out, in, weight, bias, rows, inFeatures, outFeatures, gemmOptions(), kStream);
  }
  void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                      const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures) const override {
    cuda::linearBackward(gradIn, gradWeight, gradBias, gradOut, in, weight, rows, inFeatures, outFeatures,
                         gemmOptions(), kStream);
  }
  void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n) const override {
    cuda::matmul(out, a, b, m, k, n, gemmOptions(), kStream);
  }

 private:
  // The math of this thread's op: cuda.* keys, and under a 16-bit precision.compute the
  // format the convolutions and products take their operands in (their operands hold its
  // values and their results are rounded to it: ComputePrecision.h).
  static precision::ComputeFormat sixteenBit() { return autograd::ComputePrecision::current().format(); }
  static cuda::ConvOptions convOptions(bool sixteenBitOperands) {
    const CudaMath m = cudaMath();
    return {m.deterministic, m.allowTf32, sixteenBitOperands ? sixteenBit() : precision::ComputeFormat::Fp32};
  }
  static cuda::GemmOptions gemmOptions() { return {cudaMath().allowTf32, sixteenBit()}; }
};

const CudaBackend backend;
[[maybe_unused]] const bool registered = (registerCudaBackend(&backend), true);

}  // namespace

}  // namespace aps::ops
