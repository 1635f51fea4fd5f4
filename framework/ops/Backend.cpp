#include "framework/ops/Backend.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/kernels/Elementwise.h"

#include <atomic>

namespace aps::ops {

namespace {

constexpr int64_t kGrain = 1 << 14;

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void binary(BinaryOp op, float* out, const float* a, const float* b, int64_t n) const override {
    auto run = [&](auto f) {
      parallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = f(a[i], b[i]);
      });
    };
    switch (op) {
      case BinaryOp::Add:
        return run([](float x, float y) { return kernels::add(x, y); });
      case BinaryOp::Sub:
        return run([](float x, float y) { return kernels::sub(x, y); });
      case BinaryOp::Mul:
        return run([](float x, float y) { return kernels::mul(x, y); });
      case BinaryOp::ReluBackward:
        return run([](float g, float y) { return kernels::reluBackward(g, y); });
    }
  }

  void unary(UnaryOp op, float* out, const float* x, float s, int64_t n) const override {
    auto run = [&](auto f) {
      parallelFor(n, kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = f(x[i]);
      });
    };
    switch (op) {
      case UnaryOp::Scale:
        return run([s](float v) { return kernels::scale(v, s); });
      case UnaryOp::AddScalar:
        return run([s](float v) { return kernels::addScalar(v, s); });
      case UnaryOp::Relu:
        return run([](float v) { return kernels::relu(v); });
    }
  }

  void conv2dForward(float* out, const float* in, const float* weight, const float* bias,
                     const cpu::Conv2dShape& shape) const override {
    cpu::conv2dForward(out, in, weight, bias, shape);
  }
  void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                      const float* weight, const cpu::Conv2dShape& shape) const override {
    cpu::conv2dBackward(gradIn, gradWeight, gradBias, gradOut, in, weight, shape);
  }

  bool fusedBatchNorm() const override { return true; }
  void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                             const float* in, const float* gamma, const float* beta, const cpu::BatchNormShape& shape,
                             float momentum, float eps, const cpu::BatchNormEpilogue& epilogue) const override {
    cpu::batchNormForwardTrain(out, saveMean, saveInvStd, runningMean, runningVar, in, gamma, beta, shape, momentum, eps,
                               epilogue);
  }
  void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta,
                            const float* runningMean, const float* runningVar, const cpu::BatchNormShape& shape,
                            float eps) const override {
    cpu::batchNormForwardEval(out, in, gamma, beta, runningMean, runningVar, shape, eps);
  }
  void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                         const float* gamma, const float* saveMean, const float* saveInvStd,
                         const cpu::BatchNormShape& shape, const cpu::BatchNormGradEpilogue& epilogue) const override {
    cpu::batchNormBackward(gradIn, gradGamma, gradBeta, gradOut, in, gamma, saveMean, saveInvStd, shape, epilogue);
  }

  void maxPool2dForward(float* out, int64_t* argmax, const float* in, const cpu::Pool2dShape& shape) const override {
    cpu::maxPool2dForward(out, argmax, in, shape);
  }
  void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax,
                         const cpu::Pool2dShape& shape) const override {
    cpu::maxPool2dBackward(gradIn, gradOut, argmax, shape);
  }
  void avgPool2dForward(float* out, const float* in, const cpu::Pool2dShape& shape,
                        bool countIncludePad) const override {
    cpu::avgPool2dForward(out, in, shape, countIncludePad);
  }
  void avgPool2dBackward(float* gradIn, const float* gradOut, const cpu::Pool2dShape& shape,
                         bool countIncludePad) const override {
    cpu::avgPool2dBackward(gradIn, gradOut, shape, countIncludePad);
  }
  void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                                int64_t outW) const override {
    cpu::adaptiveAvgPool2dForward(out, in, n, c, h, w, outH, outW);
  }
  void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t outH, int64_t outW) const override {
    cpu::adaptiveAvgPool2dBackward(gradIn, gradOut, n, c, h, w, outH, outW);
  }
  void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                               int64_t outW) const override {
    cpu::upsampleBilinearForward(out, in, n, c, h, w, outH, outW);
  }
  void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                                int64_t outH, int64_t outW) const override {
    cpu::upsampleBilinearBackward(gradIn, gradOut, n, c, h, w, outH, outW);
  }

  float crossEntropyForward(float* probs, const float* logits, const int64_t* targets,
                            const cpu::CrossEntropyShape& shape, float labelSmoothing,
                            int64_t ignoreIndex) const override {
    return cpu::crossEntropyForward(probs, logits, targets, shape, labelSmoothing, ignoreIndex);
  }
  void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets,
                            const cpu::CrossEntropyShape& shape, float labelSmoothing, int64_t ignoreIndex,
                            float gradLoss) const override {
    cpu::crossEntropyBackward(gradLogits, probs, targets, shape, labelSmoothing, ignoreIndex, gradLoss);
  }

  void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                     int64_t inFeatures, int64_t outFeatures) const override {
    cpu::linearForward(out, in, weight, bias, rows, inFeatures, outFeatures);
  }
  void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                      const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures) const override {
    cpu::linearBackward(gradIn, gradWeight, gradBias, gradOut, in, weight, rows, inFeatures, outFeatures);
  }
  void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n) const override {
    cpu::matmul(out, a, b, m, k, n);
  }
};

std::atomic<bool> allowTf32{true}, deterministic{false};
std::atomic<const Backend*> registeredCuda{nullptr};

}  // namespace

void setCudaMath(const CudaMath& math) {
  allowTf32 = math.allowTf32;
  deterministic = math.deterministic;
}

CudaMath cudaMath() { return {allowTf32.load(), deterministic.load()}; }

const Backend* cudaBackend() { return registeredCuda.load(); }
void registerCudaBackend(const Backend* backend) { registeredCuda = backend; }

const Backend& backendFor(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else {
      APS_CHECK(t->device() == first->device(), "{}: inputs on two devices, {} and {}; move them to one with .to()",
                op, deviceName(first->device()), deviceName(t->device()));
    }
  }
  if (first == nullptr || first->device().isCpu()) {
    static const CpuBackend cpu;
    return cpu;
  }
  const Backend* cuda = cudaBackend();
  APS_CHECK(cuda != nullptr, "{}: no kernels for {} in this program (a build without CUDA, or a program that does "
                             "not link aps_cuda_backend)",
            op, deviceName(first->device()));
  return *cuda;
}

}  // namespace aps::ops
