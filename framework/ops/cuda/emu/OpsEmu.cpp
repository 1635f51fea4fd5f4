// The GPU ops of framework/ops/cuda/{Kernels,CudnnConv,CublasGemm}.h on the emulated device
// (APS_CUDA_EMULATION=ON), built instead of Kernels.cu, CudnnConv.cpp and CublasGemm.cpp.
// Each call checks its device pointers at once (a host pointer is an error naming the call's
// buffer), then queues the CPU kernel on the stream's thread over the device memory's host
// view. The arithmetic is the CPU kernels', which call the same shared functions
// (framework/ops/kernels/*.h) the CUDA kernels launch: an emulated run computes the CPU run's
// bits. Convolution and matrix products run aps's CPU kernels behind cuDNN's and cuBLAS's
// interfaces (so deterministic and TF32 options change nothing here).
#include "framework/core/Error.h"
#include "framework/ops/cuda/CublasGemm.h"
#include "framework/ops/cuda/CudnnConv.h"
#include "framework/ops/cuda/Kernels.h"
#include "framework/ops/kernels/Elementwise.h"
#include "framework/tensor/HalfFloat.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"
#include "framework/numerics/FloatRounding.h"

#include <mutex>
#include <set>
#include <tuple>

namespace aps::cuda {

namespace {

namespace k = aps::kernels;
using emu::view;

template <class Op>
void binary(float* out, const float* a, const float* b, int64_t n, StreamHandle stream, Op op) {
  if (n <= 0) return;
  view(out, n), view(a, n), view(b, n);
  emu::enqueue(stream, [=] {
    float* o = view(out, n);
    const float *x = view(a, n), *y = view(b, n);
    for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
  });
}

template <class Op>
void unary(float* out, const float* x, int64_t n, StreamHandle stream, Op op) {
  if (n <= 0) return;
  view(out, n), view(x, n);
  emu::enqueue(stream, [=] {
    float* o = view(out, n);
    const float* v = view(x, n);
    for (int64_t i = 0; i < n; ++i) o[i] = op(v[i]);
  });
}

int64_t planes(int64_t n, int64_t c, int64_t h, int64_t w) { return n * c * h * w; }

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, StreamHandle s) {
  binary(out, a, b, n, s, [](float x, float y) { return k::add(x, y); });
}
void sub(float* out, const float* a, const float* b, int64_t n, StreamHandle s) {
  binary(out, a, b, n, s, [](float x, float y) { return k::sub(x, y); });
}
void mul(float* out, const float* a, const float* b, int64_t n, StreamHandle s) {
  binary(out, a, b, n, s, [](float x, float y) { return k::mul(x, y); });
}
void scale(float* out, const float* x, float f, int64_t n, StreamHandle s) {
  unary(out, x, n, s, [f](float v) { return k::scale(v, f); });
}
void addScalar(float* out, const float* x, float f, int64_t n, StreamHandle s) {
  unary(out, x, n, s, [f](float v) { return k::addScalar(v, f); });
}
void relu(float* out, const float* x, int64_t n, StreamHandle s) {
  unary(out, x, n, s, [](float v) { return k::relu(v); });
}
void reluBackward(float* gradIn, const float* grad, const float* y, int64_t n, StreamHandle s) {
  binary(gradIn, grad, y, n, s, [](float g, float v) { return k::reluBackward(g, v); });
}

void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps, StreamHandle s) {
  const int64_t all = shape.n * shape.c * shape.hw, c = shape.c;
  view(out, all), view(in, all), view(saveMean, c), view(saveInvStd, c), view(runningMean, c), view(runningVar, c),
      view(gamma, c), view(beta, c);
  emu::enqueue(s, [=] {
    cpu::batchNormForwardTrain(view(out, all), view(saveMean, c), view(saveInvStd, c), view(runningMean, c),
                               view(runningVar, c), view(in, all), view(gamma, c), view(beta, c), shape, momentum, eps);
  });
}

void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps, StreamHandle s) {
  const int64_t all = shape.n * shape.c * shape.hw, c = shape.c;
  view(out, all), view(in, all), view(gamma, c), view(beta, c), view(runningMean, c), view(runningVar, c);
  emu::enqueue(s, [=] {
    cpu::batchNormForwardEval(view(out, all), view(in, all), view(gamma, c), view(beta, c), view(runningMean, c),
                              view(runningVar, c), shape, eps);
  });
}

void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd, const BatchNormShape& shape,
                       StreamHandle s) {
  const int64_t all = shape.n * shape.c * shape.hw, c = shape.c;
  view(gradIn, all), view(gradGamma, c), view(gradBeta, c), view(gradOut, all), view(in, all), view(gamma, c),
      view(saveMean, c), view(saveInvStd, c);
  emu::enqueue(s, [=] {
    cpu::batchNormBackward(view(gradIn, all), view(gradGamma, c), view(gradBeta, c), view(gradOut, all), view(in, all),
                           view(gamma, c), view(saveMean, c), view(saveInvStd, c), shape);
  });
}

void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape, StreamHandle s) {
  const int64_t outN = planes(shape.n, shape.c, shape.outH(), shape.outW()),
                inN = planes(shape.n, shape.c, shape.h, shape.w);
  view(out, outN), view(argmax, outN), view(in, inN);
  emu::enqueue(s, [=] { cpu::maxPool2dForward(view(out, outN), view(argmax, outN), view(in, inN), shape); });
}

void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax, const Pool2dShape& shape,
                       StreamHandle s) {
  const int64_t outN = planes(shape.n, shape.c, shape.outH(), shape.outW()),
                inN = planes(shape.n, shape.c, shape.h, shape.w);
  view(gradIn, inN), view(gradOut, outN), view(argmax, outN);
  emu::enqueue(s, [=] { cpu::maxPool2dBackward(view(gradIn, inN), view(gradOut, outN), view(argmax, outN), shape); });
}

void avgPool2dForward(float* out, const float* in, const Pool2dShape& shape, bool countIncludePad, StreamHandle s) {
  const int64_t outN = planes(shape.n, shape.c, shape.outH(), shape.outW()),
                inN = planes(shape.n, shape.c, shape.h, shape.w);
  view(out, outN), view(in, inN);
  emu::enqueue(s, [=] { cpu::avgPool2dForward(view(out, outN), view(in, inN), shape, countIncludePad); });
}

void avgPool2dBackward(float* gradIn, const float* gradOut, const Pool2dShape& shape, bool countIncludePad,
                       StreamHandle s) {
  const int64_t outN = planes(shape.n, shape.c, shape.outH(), shape.outW()),
                inN = planes(shape.n, shape.c, shape.h, shape.w);
  view(gradIn, inN), view(gradOut, outN);
  emu::enqueue(s, [=] { cpu::avgPool2dBackward(view(gradIn, inN), view(gradOut, outN), shape, countIncludePad); });
}

void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                              int64_t outW, StreamHandle s) {
  const int64_t outN = planes(n, c, outH, outW), inN = planes(n, c, h, w);
  view(out, outN), view(in, inN);
  emu::enqueue(s, [=] { cpu::adaptiveAvgPool2dForward(view(out, outN), view(in, inN), n, c, h, w, outH, outW); });
}

void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                               int64_t outH, int64_t outW, StreamHandle s) {
  const int64_t outN = planes(n, c, outH, outW), inN = planes(n, c, h, w);
  view(gradIn, inN), view(gradOut, outN);
  emu::enqueue(s,
               [=] { cpu::adaptiveAvgPool2dBackward(view(gradIn, inN), view(gradOut, outN), n, c, h, w, outH, outW); });
}

void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                             int64_t outW, StreamHandle s) {
  const int64_t outN = planes(n, c, outH, outW), inN = planes(n, c, h, w);
  view(out, outN), view(in, inN);
  emu::enqueue(s, [=] { cpu::upsampleBilinearForward(view(out, outN), view(in, inN), n, c, h, w, outH, outW); });
}

void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t outH, int64_t outW, StreamHandle s) {
  const int64_t outN = planes(n, c, outH, outW), inN = planes(n, c, h, w);
  view(gradIn, inN), view(gradOut, outN);
  emu::enqueue(s,
               [=] { cpu::upsampleBilinearBackward(view(gradIn, inN), view(gradOut, outN), n, c, h, w, outH, outW); });
}

float crossEntropyForward(float* probs, const float* logits, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, StreamHandle s) {
  const int64_t all = shape.n * shape.c * shape.spatial, positions = shape.n * shape.spatial;
  view(probs, all), view(logits, all), view(targets, positions);
  return emu::runAndWait(s, [=] {
    return cpu::crossEntropyForward(view(probs, all), view(logits, all), view(targets, positions), shape,
                                    labelSmoothing, ignoreIndex);
  });
}

void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, float gradLoss, StreamHandle s) {
  const int64_t all = shape.n * shape.c * shape.spatial, positions = shape.n * shape.spatial;
  view(gradLogits, all), view(probs, all), view(targets, positions);
  emu::enqueue(s, [=] {
    cpu::crossEntropyBackward(view(gradLogits, all), view(probs, all), view(targets, positions), shape, labelSmoothing,
                              ignoreIndex, gradLoss);
  });
}

// ---- cuDNN's and cuBLAS's entry points ------------------------------------------------

namespace {
std::mutex plansMutex;
std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t, int64_t, int64_t, bool, bool, precision::ComputeFormat>>
    plans;

// The plan cache's bookkeeping, as cuDNN's wrapper keeps it (one choice per shape and options).
void notePlan(const cpu::Conv2dShape& s, const ConvOptions& o) {
  std::lock_guard lock(plansMutex);
  plans.emplace(s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.strideH, s.strideW, s.padH, s.padW, s.dilationH, s.dilationW,
                s.groups, o.deterministic, o.allowTf32, o.format);
}

// A 16-bit convolution's results are 2-byte values on a GPU (ConvOptions::format): rounded here.
// A biased one runs in float32 there (CudaBackend), as here.
void roundResult(float* data, int64_t n, precision::ComputeFormat format) {
  if (data == nullptr || format == precision::ComputeFormat::Fp32) return;
  const auto round =
      format == precision::ComputeFormat::Fp16 ? precision::kernels::roundFp16 : precision::kernels::roundBf16;
  for (int64_t i = 0; i < n; ++i) data[i] = round(data[i]);
}

struct ConvSizes {
  int64_t in, weight, out;
};
ConvSizes convSizes(const cpu::Conv2dShape& s) {
  return {s.n * s.c * s.h * s.w, s.k * (s.c / s.groups) * s.r * s.s, s.n * s.k * s.outH() * s.outW()};
}
}  // namespace

size_t convolutionPlansCached() {
  std::lock_guard lock(plansMutex);
  return plans.size();
}

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const cpu::Conv2dShape& shape,
                   const ConvOptions& options, StreamHandle s) {
  APS_CHECK(bias == nullptr || options.format == precision::ComputeFormat::Fp32,
            "conv2d on cuda: a biased convolution runs in float32 (its bias is added before the one rounding)");
  notePlan(shape, options);
  const ConvSizes z = convSizes(shape);
  view(out, z.out), view(in, z.in), view(weight, z.weight), view(bias, shape.k);
  emu::enqueue(s, [=] {
    cpu::conv2dForward(view(out, z.out), view(in, z.in), view(weight, z.weight), view(bias, shape.k), shape);
    roundResult(view(out, z.out), z.out, options.format);
  });
}

void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const cpu::Conv2dShape& shape, const ConvOptions& options, StreamHandle s) {
  notePlan(shape, options);
  const ConvSizes z = convSizes(shape);
  view(gradIn, z.in), view(gradWeight, z.weight), view(gradBias, shape.k), view(gradOut, z.out), view(in, z.in),
      view(weight, z.weight);
  emu::enqueue(s, [=] {
    cpu::conv2dBackward(view(gradIn, z.in), view(gradWeight, z.weight), view(gradBias, shape.k), view(gradOut, z.out),
                        view(in, z.in), view(weight, z.weight), shape);
    roundResult(view(gradIn, z.in), z.in, options.format);
    roundResult(view(gradWeight, z.weight), z.weight, options.format);
  });
}

void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n, const GemmOptions&,
            StreamHandle s) {
  view(out, m * n), view(a, m * k), view(b, k * n);
  emu::enqueue(s, [=] { cpu::matmul(view(out, m * n), view(a, m * k), view(b, k * n), m, k, n); });
}

void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                   int64_t inFeatures, int64_t outFeatures, const GemmOptions&, StreamHandle s) {
  const int64_t o = rows * outFeatures, i = rows * inFeatures, w = outFeatures * inFeatures;
  view(out, o), view(in, i), view(weight, w), view(bias, outFeatures);
  emu::enqueue(s, [=] {
    cpu::linearForward(view(out, o), view(in, i), view(weight, w), view(bias, outFeatures), rows, inFeatures,
                       outFeatures);
  });
}

void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures, const GemmOptions&,
                    StreamHandle s) {
  const int64_t o = rows * outFeatures, i = rows * inFeatures, w = outFeatures * inFeatures;
  view(gradIn, i), view(gradWeight, w), view(gradBias, outFeatures), view(gradOut, o), view(in, i), view(weight, w);
  emu::enqueue(s, [=] {
    cpu::linearBackward(view(gradIn, i), view(gradWeight, w), view(gradBias, outFeatures), view(gradOut, o),
                        view(in, i), view(weight, w), rows, inFeatures, outFeatures);
  });
}

void toSixteenBit(void* out, const float* in, int64_t n, precision::ComputeFormat format, StreamHandle s) {
  if (n <= 0) return;
  auto* o = static_cast<uint16_t*>(out);
  view(o, n), view(in, n);
  emu::enqueue(s, [=] {
    uint16_t* d = view(o, n);
    const float* x = view(in, n);
    for (int64_t i = 0; i < n; ++i) {
      d[i] = format == precision::ComputeFormat::Fp16 ? floatToHalfBits(x[i]) : floatToBFloat16Bits(x[i]);
    }
  });
}

void fromSixteenBit(float* out, const void* in, int64_t n, precision::ComputeFormat format, StreamHandle s) {
  if (n <= 0) return;
  const auto* h = static_cast<const uint16_t*>(in);
  view(out, n), view(h, n);
  emu::enqueue(s, [=] {
    float* d = view(out, n);
    const uint16_t* x = view(h, n);
    for (int64_t i = 0; i < n; ++i) {
      d[i] = format == precision::ComputeFormat::Fp16 ? halfBitsToFloat(x[i]) : bfloat16BitsToFloat(x[i]);
    }
  });
}

}  // namespace aps::cuda
