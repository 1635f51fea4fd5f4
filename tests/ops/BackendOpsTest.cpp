// One harness for every kernel on every backend (the idea of ggml's test-backend-ops): each op
// is described once (its inputs, how to run forward and backward on a backend, its
// tolerances) and then
//   - on the CPU its backward is checked against central finite differences of its forward
//     (L = sum_i g_i * f(x)_i for a fixed random g, accumulated in double), and
//   - on every other backend present (CUDA) its forward output and every input gradient are
//     compared with the CPU's, within the op's tolerance for that precision.
// A machine without a GPU runs the CPU checks and reports the device checks as skipped.
#include "framework/ops/cpu/Kernels.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/RandomVector.h"

#if APS_WITH_CUDA
#include "framework/ops/cuda/CublasGemm.h"
#include "framework/ops/cuda/CudnnConv.h"
#include "framework/ops/cuda/Kernels.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using aps::Device;
using aps::Tensor;

enum class Backend { Cpu, Cuda };

using aps::testsupport::randomVector;

// Buffers of one run on one backend: tensors on its device, handed to kernels as pointers.
class Buffers {
 public:
  explicit Buffers(Backend backend) : device_(backend == Backend::Cpu ? Device::cpu() : Device::cuda()) {}
  float* upload(const std::vector<float>& values) {
    return keep(Tensor::fromVector(values, {static_cast<int64_t>(values.size())})).data<float>();
  }
  int64_t* upload(const std::vector<int64_t>& values) {
    return keep(Tensor::fromVector(std::span<const int64_t>(values), {static_cast<int64_t>(values.size())}))
        .data<int64_t>();
  }
  float* floats(size_t n) { return upload(std::vector<float>(n, 0.0f)); }
  int64_t* indices(size_t n) { return upload(std::vector<int64_t>(n, 0)); }
  // The values behind a pointer this object handed out.
  std::vector<float> download(const float* p) const {
    for (const Tensor& t : tensors_) {
      if (t.dtype() == aps::DType::Float32 && t.data<float>() == p) return t.toFloatVector();
    }
    ADD_FAILURE() << "download of an unknown pointer";
    return {};
  }

 private:
  Tensor keep(const Tensor& host) {
    tensors_.push_back(host.to(device_));
    return tensors_.back();
  }
  Device device_;
  std::vector<Tensor> tensors_;
};

using Inputs = std::vector<const float*>;
using Grads = std::vector<float*>;  // one per input; null for inputs that are not differentiable

struct OpCase {
  std::string name;
  std::vector<std::vector<float>> inputs;
  std::vector<bool> differentiable;
  size_t outputSize = 0;
  std::function<void(Backend, Buffers&, const Inputs&, float* out)> forward;
  std::function<void(Backend, Buffers&, const Inputs&, const float* gradOut, const Grads&)> backward;
  float step = 1e-2f;               // finite-difference step
  double gradientTolerance = 5e-3;  // CPU: |numeric - analytic| / max |analytic|
  double deviceTolerance = 1e-5;    // other backends: |device - cpu| / max |cpu|, fp32
  double tf32Tolerance = 0.0;       // > 0: the op runs with TF32 tensor cores on the device
};

struct Result {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
};

Result runOn(Backend backend, const OpCase& op, const std::vector<std::vector<float>>& inputs,
             const std::vector<float>& gradOut) {
  Buffers buffers(backend);
  Inputs in;
  Grads grads;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(buffers.upload(inputs[i]));
    grads.push_back(op.differentiable[i] ? buffers.floats(inputs[i].size()) : nullptr);
  }
  float* out = buffers.floats(op.outputSize);
  op.forward(backend, buffers, in, out);
  Result result;
  result.output = buffers.download(out);
  if (!gradOut.empty()) {
    op.backward(backend, buffers, in, buffers.upload(gradOut), grads);
    for (float* g : grads) result.grads.push_back(g != nullptr ? buffers.download(g) : std::vector<float>{});
  }
  return result;
}

double weightedSum(const std::vector<float>& y, const std::vector<float>& g) {
  double total = 0.0;
  for (size_t i = 0; i < y.size(); ++i) total += static_cast<double>(y[i]) * g[i];
  return total;
}

// max |a - b| / max(|b|, floor): the error relative to the reference's scale.
double relativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double maxError = 0.0, maxMagnitude = 1e-3;
  for (size_t i = 0; i < b.size(); ++i) {
    maxError = std::max(maxError, std::abs(static_cast<double>(a[i]) - b[i]));
    maxMagnitude = std::max(maxMagnitude, std::abs(static_cast<double>(b[i])));
  }
  return a.size() == b.size() ? maxError / maxMagnitude : INFINITY;
}

// ---- the backends' kernels, one call site per op ----

#if APS_WITH_CUDA
#define ON_BACKEND(backend, cpuCall, cudaCall) \
  do {                                         \
    if ((backend) == Backend::Cpu) {           \
      cpuCall;                                 \
    } else {                                   \
      cudaCall;                                \
    }                                          \
  } while (0)
#else
#define ON_BACKEND(backend, cpuCall, cudaCall) \
  do {                                         \
    (void)(backend);                           \
    cpuCall;                                   \
  } while (0)
#endif

// TF32 is off in the comparison runs: the harness checks the kernels' arithmetic, and the
// TF32 path is compared separately at its own tolerance.
bool useTf32 = false;

OpCase conv2d(const std::string& name, const aps::cpu::Conv2dShape& s) {
  OpCase op;
  op.name = name;
  op.inputs = {randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 1),
               randomVector(static_cast<size_t>(s.k * (s.c / s.groups) * s.r * s.s), 2),
               randomVector(static_cast<size_t>(s.k), 3)};
  op.differentiable = {true, true, true};
  op.outputSize = static_cast<size_t>(s.n * s.k * s.outH() * s.outW());
  op.forward = [s](Backend b, Buffers&, const Inputs& in, float* out) {
    ON_BACKEND(b, aps::cpu::conv2dForward(out, in[0], in[1], in[2], s),
               aps::cuda::conv2dForward(out, in[0], in[1], in[2], s, {false, useTf32}, nullptr));
  };
  op.backward = [s](Backend b, Buffers&, const Inputs& in, const float* g, const Grads& gr) {
    ON_BACKEND(b, aps::cpu::conv2dBackward(gr[0], gr[1], gr[2], g, in[0], in[1], s),
               aps::cuda::conv2dBackward(gr[0], gr[1], gr[2], g, in[0], in[1], s, {false, useTf32}, nullptr));
  };
  op.deviceTolerance = 1e-4;  // cuDNN's algorithms sum in another order
  op.tf32Tolerance = 5e-3;
  return op;
}

// A fully connected layer: on the CPU the 1x1 convolution of a 1x1 image (the same product),
// on the GPU cuBLAS.
OpCase linear(int64_t rows, int64_t inFeatures, int64_t outFeatures) {
  aps::cpu::Conv2dShape s;
  s.n = rows, s.c = inFeatures, s.k = outFeatures;
  OpCase op = conv2d("linear", s);
  op.forward = [=](Backend b, Buffers&, const Inputs& in, float* out) {
    ON_BACKEND(b, aps::cpu::conv2dForward(out, in[0], in[1], in[2], s),
               aps::cuda::linearForward(out, in[0], in[1], in[2], rows, inFeatures, outFeatures, {useTf32}, nullptr));
  };
  op.backward = [=](Backend b, Buffers&, const Inputs& in, const float* g, const Grads& gr) {
    ON_BACKEND(b, aps::cpu::conv2dBackward(gr[0], gr[1], gr[2], g, in[0], in[1], s),
               aps::cuda::linearBackward(gr[0], gr[1], gr[2], g, in[0], in[1], rows, inFeatures, outFeatures, {useTf32},
                                         nullptr));
  };
  return op;
}

OpCase batchNormTrain() {
  const aps::cpu::BatchNormShape s{3, 2, 5};
  const size_t size = static_cast<size_t>(s.n * s.c * s.hw);
  OpCase op;
  op.name = "batch_norm_train";
  op.inputs = {randomVector(size, 5, 2.0f), randomVector(2, 6), randomVector(2, 7)};
  op.differentiable = {true, true, true};
  op.outputSize = size;
  auto forward = [s](Backend b, const Inputs& in, float* out, float* mean, float* invStd) {
    ON_BACKEND(
        b, aps::cpu::batchNormForwardTrain(out, mean, invStd, nullptr, nullptr, in[0], in[1], in[2], s, 0.1f, 1e-5f),
        aps::cuda::batchNormForwardTrain(out, mean, invStd, nullptr, nullptr, in[0], in[1], in[2], s, 0.1f, 1e-5f,
                                         nullptr));
  };
  op.forward = [forward, s](Backend b, Buffers& buf, const Inputs& in, float* out) {
    forward(b, in, out, buf.floats(static_cast<size_t>(s.c)), buf.floats(static_cast<size_t>(s.c)));
  };
  op.backward = [forward, s, size](Backend b, Buffers& buf, const Inputs& in, const float* g, const Grads& gr) {
    float* mean = buf.floats(static_cast<size_t>(s.c));
    float* invStd = buf.floats(static_cast<size_t>(s.c));
    forward(b, in, buf.floats(size), mean, invStd);
    ON_BACKEND(b, aps::cpu::batchNormBackward(gr[0], gr[1], gr[2], g, in[0], in[1], mean, invStd, s),
               aps::cuda::batchNormBackward(gr[0], gr[1], gr[2], g, in[0], in[1], mean, invStd, s, nullptr));
  };
  return op;
}

aps::cpu::Pool2dShape poolShape() {
  aps::cpu::Pool2dShape s;
  s.n = 2, s.c = 2, s.h = 7, s.w = 6, s.kernelH = 3, s.kernelW = 3, s.strideH = 2, s.strideW = 2, s.padH = 1,
  s.padW = 1;
  return s;
}

OpCase maxPool() {
  const aps::cpu::Pool2dShape s = poolShape();
  const size_t inSize = static_cast<size_t>(s.n * s.c * s.h * s.w);
  const size_t outSize = static_cast<size_t>(s.n * s.c * s.outH() * s.outW());
  OpCase op;
  op.name = "max_pool";
  // Distinct, well separated values keep every maximum away from a tie under the step.
  std::vector<float> x(inSize);
  for (size_t i = 0; i < inSize; ++i) x[i] = static_cast<float>((i * 37) % inSize) * 0.1f;
  op.inputs = {x};
  op.differentiable = {true};
  op.outputSize = outSize;
  op.forward = [s, outSize](Backend b, Buffers& buf, const Inputs& in, float* out) {
    int64_t* argmax = buf.indices(outSize);
    ON_BACKEND(b, aps::cpu::maxPool2dForward(out, argmax, in[0], s),
               aps::cuda::maxPool2dForward(out, argmax, in[0], s, nullptr));
  };
  op.backward = [s, outSize](Backend b, Buffers& buf, const Inputs& in, const float* g, const Grads& gr) {
    int64_t* argmax = buf.indices(outSize);
    float* out = buf.floats(outSize);
    ON_BACKEND(b, aps::cpu::maxPool2dForward(out, argmax, in[0], s),
               aps::cuda::maxPool2dForward(out, argmax, in[0], s, nullptr));
    ON_BACKEND(b, aps::cpu::maxPool2dBackward(gr[0], g, argmax, s),
               aps::cuda::maxPool2dBackward(gr[0], g, argmax, s, nullptr));
  };
  op.deviceTolerance = 0.0;  // a maximum and a scatter of it: exact
  return op;
}

OpCase avgPool(bool includePad) {
  const aps::cpu::Pool2dShape s = poolShape();
  OpCase op;
  op.name = includePad ? "avg_pool_include_pad" : "avg_pool_exclude_pad";
  op.inputs = {randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 13)};
  op.differentiable = {true};
  op.outputSize = static_cast<size_t>(s.n * s.c * s.outH() * s.outW());
  op.forward = [s, includePad](Backend b, Buffers&, const Inputs& in, float* out) {
    ON_BACKEND(b, aps::cpu::avgPool2dForward(out, in[0], s, includePad),
               aps::cuda::avgPool2dForward(out, in[0], s, includePad, nullptr));
  };
  op.backward = [s, includePad](Backend b, Buffers&, const Inputs&, const float* g, const Grads& gr) {
    ON_BACKEND(b, aps::cpu::avgPool2dBackward(gr[0], g, s, includePad),
               aps::cuda::avgPool2dBackward(gr[0], g, s, includePad, nullptr));
  };
  return op;
}

OpCase adaptiveAvgPool(int64_t outH, int64_t outW) {
  const int64_t n = 1, c = 2, h = 5, w = 7;
  OpCase op;
  op.name = "adaptive_avg_pool_" + std::to_string(outH) + "x" + std::to_string(outW);
  op.inputs = {randomVector(static_cast<size_t>(n * c * h * w), 10)};
  op.differentiable = {true};
  op.outputSize = static_cast<size_t>(n * c * outH * outW);
  op.forward = [=](Backend b, Buffers&, const Inputs& in, float* out) {
    ON_BACKEND(b, aps::cpu::adaptiveAvgPool2dForward(out, in[0], n, c, h, w, outH, outW),
               aps::cuda::adaptiveAvgPool2dForward(out, in[0], n, c, h, w, outH, outW, nullptr));
  };
  op.backward = [=](Backend b, Buffers&, const Inputs&, const float* g, const Grads& gr) {
    ON_BACKEND(b, aps::cpu::adaptiveAvgPool2dBackward(gr[0], g, n, c, h, w, outH, outW),
               aps::cuda::adaptiveAvgPool2dBackward(gr[0], g, n, c, h, w, outH, outW, nullptr));
  };
  return op;
}

OpCase upsampleBilinear(int64_t outH, int64_t outW) {
  const int64_t n = 1, c = 2, h = 5, w = 7;
  OpCase op;
  op.name = "upsample_bilinear_" + std::to_string(outH) + "x" + std::to_string(outW);
  op.inputs = {randomVector(static_cast<size_t>(n * c * h * w), 10)};
  op.differentiable = {true};
  op.outputSize = static_cast<size_t>(n * c * outH * outW);
  op.forward = [=](Backend b, Buffers&, const Inputs& in, float* out) {
    ON_BACKEND(b, aps::cpu::upsampleBilinearForward(out, in[0], n, c, h, w, outH, outW),
               aps::cuda::upsampleBilinearForward(out, in[0], n, c, h, w, outH, outW, nullptr));
  };
  op.backward = [=](Backend b, Buffers&, const Inputs&, const float* g, const Grads& gr) {
    ON_BACKEND(b, aps::cpu::upsampleBilinearBackward(gr[0], g, n, c, h, w, outH, outW),
               aps::cuda::upsampleBilinearBackward(gr[0], g, n, c, h, w, outH, outW, nullptr));
  };
  return op;
}

// The loss as a one-element output (its gradient scale is the upstream gradient).
OpCase crossEntropy() {
  const aps::cpu::CrossEntropyShape s{2, 4, 3};
  const std::vector<int64_t> targets = {0, 255, 3, 2, 1, 255};
  OpCase op;
  op.name = "cross_entropy_smoothing_ignore";
  op.inputs = {randomVector(24, 12, 2.0f)};
  op.differentiable = {true};
  op.outputSize = 1;
  auto forward = [s, targets](Backend b, Buffers& buf, const float* logits, float* probs) {
    const int64_t* t = buf.upload(targets);
    float loss = 0.0f;
    ON_BACKEND(b, loss = aps::cpu::crossEntropyForward(probs, logits, t, s, 0.1f, 255),
               loss = aps::cuda::crossEntropyForward(probs, logits, t, s, 0.1f, 255, nullptr));
    return loss;
  };
  op.forward = [forward](Backend b, Buffers& buf, const Inputs& in, float* out) {
    const float loss = forward(b, buf, in[0], buf.floats(24));
    aps::Tensor value = aps::Tensor::fromVector({loss}, {1});
    if (b == Backend::Cpu) {
      *out = loss;
    } else {
      aps::cuda::copySync(out, value.data<float>(), sizeof(float), aps::cuda::CopyKind::HostToDevice);
    }
  };
  op.backward = [forward, s, targets](Backend b, Buffers& buf, const Inputs& in, const float* g, const Grads& gr) {
    float* probs = buf.floats(24);
    forward(b, buf, in[0], probs);
    float gradLoss = 0.0f;  // the upstream gradient of the scalar loss, read back from its buffer
    if (b == Backend::Cpu) {
      gradLoss = *g;
    } else {
      aps::cuda::copySync(&gradLoss, g, sizeof(float), aps::cuda::CopyKind::DeviceToHost);
    }
    const int64_t* t = buf.upload(targets);
    ON_BACKEND(b, aps::cpu::crossEntropyBackward(gr[0], probs, t, s, 0.1f, 255, gradLoss),
               aps::cuda::crossEntropyBackward(gr[0], probs, t, s, 0.1f, 255, gradLoss, nullptr));
  };
  return op;
}

std::vector<OpCase> allOps() {
  std::vector<OpCase> ops;
  for (int variant = 0; variant < 3; ++variant) {
    aps::cpu::Conv2dShape s;
    s.n = 2, s.c = 4, s.h = 6, s.w = 5, s.k = 4, s.r = 3, s.s = 3, s.padH = 1, s.padW = 2;
    if (variant == 0) s.strideH = 2, s.strideW = 2;
    if (variant == 1) s.dilationH = 2, s.dilationW = 2, s.padH = 2;
    if (variant == 2) s.groups = 2;
    ops.push_back(conv2d(std::string("conv2d_") + (variant == 0 ? "stride" : variant == 1 ? "dilation" : "groups"), s));
  }
  ops.push_back(linear(5, 7, 3));
  ops.push_back(batchNormTrain());
  ops.push_back(maxPool());
  ops.push_back(avgPool(true));
  ops.push_back(avgPool(false));
  ops.push_back(adaptiveAvgPool(3, 4));
  ops.push_back(adaptiveAvgPool(9, 11));
  ops.push_back(upsampleBilinear(3, 4));
  ops.push_back(upsampleBilinear(9, 11));
  ops.push_back(crossEntropy());
  return ops;
}

class BackendOps : public ::testing::TestWithParam<OpCase> {};

TEST_P(BackendOps, CpuBackwardMatchesFiniteDifferences) {
  const OpCase& op = GetParam();
  const std::vector<float> gradOut = randomVector(op.outputSize, 4);
  const Result analytic = runOn(Backend::Cpu, op, op.inputs, gradOut);
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    if (!op.differentiable[k]) continue;
    std::vector<std::vector<float>> inputs = op.inputs;
    std::vector<float> numeric(inputs[k].size());
    for (size_t j = 0; j < inputs[k].size(); ++j) {
      const float saved = inputs[k][j];
      inputs[k][j] = saved + op.step;
      const double plus = weightedSum(runOn(Backend::Cpu, op, inputs, {}).output, gradOut);
      inputs[k][j] = saved - op.step;
      const double minus = weightedSum(runOn(Backend::Cpu, op, inputs, {}).output, gradOut);
      inputs[k][j] = saved;
      numeric[j] = static_cast<float>((plus - minus) / (2.0 * static_cast<double>(op.step)));
    }
    EXPECT_LT(relativeError(numeric, analytic.grads[k]), op.gradientTolerance) << op.name << ", input " << k;
  }
}

TEST_P(BackendOps, CudaMatchesCpu) {
  if (!aps::cuda::compiledWithCuda()) GTEST_SKIP() << "this build has no CUDA backend";
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const OpCase& op = GetParam();
  const std::vector<float> gradOut = randomVector(op.outputSize, 4);
  const Result cpu = runOn(Backend::Cpu, op, op.inputs, gradOut);
  for (bool tf32 : {false, true}) {
    if (tf32 && op.tf32Tolerance == 0.0) continue;
    useTf32 = tf32;
    const Result cuda = runOn(Backend::Cuda, op, op.inputs, gradOut);
    useTf32 = false;
    const double tolerance = tf32 ? op.tf32Tolerance : op.deviceTolerance;
    EXPECT_LE(relativeError(cuda.output, cpu.output), tolerance) << op.name << " forward, tf32 " << tf32;
    for (size_t k = 0; k < cpu.grads.size(); ++k) {
      if (!op.differentiable[k]) continue;
      EXPECT_LE(relativeError(cuda.grads[k], cpu.grads[k]), tolerance)
          << op.name << " input " << k << ", tf32 " << tf32;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps, ::testing::ValuesIn(allOps()),
                         [](const ::testing::TestParamInfo<OpCase>& tested) { return tested.param.name; });

}  // namespace
