// Each CUDA op kernel against the CPU kernel on the same inputs. Exact (same bits) wherever
// the device runs the CPU's float operations in the CPU's order: element-wise ops, batch norm
// (statistics included), pooling, upsampling, cross-entropy backward and the optimizer
// updates. Cross-entropy forward takes expf and log from CUDA's library rather than glibc's
// and sums the per-position losses in a tree: probabilities within 4 ulp (relative 5e-7),
// the loss within relative 1e-6. Skips without a device.
#include "framework/ops/Elementwise.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cuda/Kernels.h"
#include "framework/optim/AdamW.h"
#include "framework/optim/Lars.h"
#include "framework/optim/Sgd.h"
#include "framework/optim/cuda/Updates.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tests/common/RandomVector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using aps::NamedTensors;
using aps::Tensor;

// A device copy of a host vector (through aps's runtime, so the emulated device serves it
// too); download() brings it back after the device finished.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    data_ = static_cast<T*>(aps::cuda::rawMalloc(std::max<size_t>(size_, 1) * sizeof(T), 0));
    if (data_ == nullptr) throw std::runtime_error("out of device memory");
    if (size_ > 0) aps::cuda::copySync(data_, host.data(), size_ * sizeof(T), aps::cuda::CopyKind::HostToDevice);
  }
  explicit DeviceBuffer(size_t size) : DeviceBuffer(std::vector<T>(size)) {}
  ~DeviceBuffer() { aps::cuda::rawFree(data_, 0); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }
  std::vector<T> download() const {
    aps::cuda::synchronize(0);
    std::vector<T> host(size_);
    if (size_ > 0) aps::cuda::copySync(host.data(), data_, size_ * sizeof(T), aps::cuda::CopyKind::DeviceToHost);
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t size_;
};

using aps::testsupport::randomVector;

void expectSameBits(const std::vector<float>& device, const std::vector<float>& cpu, const std::string& what) {
  ASSERT_EQ(device.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(aps::bitCast<uint32_t>(device[i]), aps::bitCast<uint32_t>(cpu[i]))
        << what << " at " << i << ": device " << device[i] << ", cpu " << cpu[i];
  }
}

#define SKIP_WITHOUT_DEVICE() \
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device"

TEST(OpsDevice, ElementwiseOpsAreExact) {
  SKIP_WITHOUT_DEVICE();
  const int64_t n = 100003;
  const std::vector<float> a = randomVector(n, 1), b = randomVector(n, 2);
  const Tensor ta = Tensor::fromVector(a, {n}), tb = Tensor::fromVector(b, {n});
  DeviceBuffer<float> da(a), db(b), out(static_cast<size_t>(n));
  aps::cuda::add(out.get(), da.get(), db.get(), n);
  expectSameBits(out.download(), aps::ops::add(ta, tb).toVector<float>(), "add");
  aps::cuda::sub(out.get(), da.get(), db.get(), n);
  expectSameBits(out.download(), aps::ops::sub(ta, tb).toVector<float>(), "sub");
  aps::cuda::mul(out.get(), da.get(), db.get(), n);
  expectSameBits(out.download(), aps::ops::mul(ta, tb).toVector<float>(), "mul");
  aps::cuda::scale(out.get(), da.get(), 0.37f, n);
  expectSameBits(out.download(), aps::ops::mul(ta, 0.37f).toVector<float>(), "scale");
  aps::cuda::addScalar(out.get(), da.get(), -1.25f, n);
  expectSameBits(out.download(), aps::ops::addScalar(ta, -1.25f).toVector<float>(), "addScalar");
  aps::cuda::relu(out.get(), da.get(), n);
  const std::vector<float> y = aps::ops::relu(ta).toVector<float>();
  expectSameBits(out.download(), y, "relu");
  std::vector<float> gradCpu(static_cast<size_t>(n));
  for (size_t i = 0; i < gradCpu.size(); ++i) gradCpu[i] = y[i] > 0.0f ? b[i] : 0.0f;
  DeviceBuffer<float> dy(y);
  aps::cuda::reluBackward(out.get(), db.get(), dy.get(), n);
  expectSameBits(out.download(), gradCpu, "reluBackward");
}

TEST(OpsDevice, BatchNormIsExact) {
  SKIP_WITHOUT_DEVICE();
  for (const aps::cpu::BatchNormShape s : {aps::cpu::BatchNormShape{8, 16, 1024}, aps::cpu::BatchNormShape{37, 3, 49},
                                           aps::cpu::BatchNormShape{2, 5, 1}}) {
    const size_t total = static_cast<size_t>(s.n * s.c * s.hw), c = static_cast<size_t>(s.c);
    const std::vector<float> x = randomVector(total, 3, 1.0f, 0.5f), gradOut = randomVector(total, 4);
    const std::vector<float> gamma = randomVector(c, 5), beta = randomVector(c, 6);
    std::vector<float> runMean = randomVector(c, 7), runVar(c, 1.5f);
    DeviceBuffer<float> dx(x), dg(gradOut), dGamma(gamma), dBeta(beta), dRunMean(runMean), dRunVar(runVar);
    DeviceBuffer<float> out(total), saveMean(c), saveInvStd(c), gradIn(total), gradGamma(c), gradBeta(c);
    std::vector<float> cOut(total), cMean(c), cInvStd(c), cGradIn(total), cGradGamma(c), cGradBeta(c);
    aps::cpu::batchNormForwardTrain(cOut.data(), cMean.data(), cInvStd.data(), runMean.data(), runVar.data(), x.data(),
                                    gamma.data(), beta.data(), s, 0.1f, 1e-5f);
    aps::cuda::batchNormForwardTrain(out.get(), saveMean.get(), saveInvStd.get(), dRunMean.get(), dRunVar.get(),
                                     dx.get(), dGamma.get(), dBeta.get(), s, 0.1f, 1e-5f);
    expectSameBits(out.download(), cOut, "batch norm train out");
    expectSameBits(saveMean.download(), cMean, "batch norm mean");
    expectSameBits(saveInvStd.download(), cInvStd, "batch norm invstd");
    expectSameBits(dRunMean.download(), runMean, "batch norm running mean");
    expectSameBits(dRunVar.download(), runVar, "batch norm running var");
    aps::cpu::batchNormBackward(cGradIn.data(), cGradGamma.data(), cGradBeta.data(), gradOut.data(), x.data(),
                                gamma.data(), cMean.data(), cInvStd.data(), s);
    aps::cuda::batchNormBackward(gradIn.get(), gradGamma.get(), gradBeta.get(), dg.get(), dx.get(), dGamma.get(),
                                 saveMean.get(), saveInvStd.get(), s);
    expectSameBits(gradIn.download(), cGradIn, "batch norm grad in");
    expectSameBits(gradGamma.download(), cGradGamma, "batch norm grad gamma");
    expectSameBits(gradBeta.download(), cGradBeta, "batch norm grad beta");
    aps::cpu::batchNormForwardEval(cOut.data(), x.data(), gamma.data(), beta.data(), runMean.data(), runVar.data(), s,
                                   1e-5f);
    aps::cuda::batchNormForwardEval(out.get(), dx.get(), dGamma.get(), dBeta.get(), dRunMean.get(), dRunVar.get(), s,
                                    1e-5f);
    expectSameBits(out.download(), cOut, "batch norm eval");
  }
}

TEST(OpsDevice, PoolingIsExact) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t kernel : {2, 3}) {
    for (int64_t stride : {1, 2}) {
      for (int64_t pad = 0; 2 * pad <= kernel; ++pad) {
        aps::cpu::Pool2dShape s;
        s.n = 3, s.c = 4, s.h = 15, s.w = 13, s.kernelH = kernel, s.kernelW = kernel, s.strideH = stride,
        s.strideW = stride, s.padH = pad, s.padW = pad;
        const size_t in = static_cast<size_t>(s.n * s.c * s.h * s.w),
                     out = static_cast<size_t>(s.n * s.c * s.outH() * s.outW());
        const std::vector<float> x = randomVector(in, 8), g = randomVector(out, 9);
        DeviceBuffer<float> dx(x), dg(g), dOut(out), dGradIn(in);
        DeviceBuffer<int64_t> dArgmax(out);
        std::vector<float> cOut(out), cGradIn(in);
        std::vector<int64_t> cArgmax(out);
        aps::cpu::maxPool2dForward(cOut.data(), cArgmax.data(), x.data(), s);
        aps::cuda::maxPool2dForward(dOut.get(), dArgmax.get(), dx.get(), s);
        expectSameBits(dOut.download(), cOut, "max pool");
        EXPECT_EQ(dArgmax.download(), cArgmax);
        aps::cpu::maxPool2dBackward(cGradIn.data(), g.data(), cArgmax.data(), s);
        aps::cuda::maxPool2dBackward(dGradIn.get(), dg.get(), dArgmax.get(), s);
        expectSameBits(dGradIn.download(), cGradIn, "max pool backward");
        for (bool includePad : {false, true}) {
          aps::cpu::avgPool2dForward(cOut.data(), x.data(), s, includePad);
          aps::cuda::avgPool2dForward(dOut.get(), dx.get(), s, includePad);
          expectSameBits(dOut.download(), cOut, "avg pool");
          aps::cpu::avgPool2dBackward(cGradIn.data(), g.data(), s, includePad);
          aps::cuda::avgPool2dBackward(dGradIn.get(), dg.get(), s, includePad);
          expectSameBits(dGradIn.download(), cGradIn, "avg pool backward");
        }
      }
    }
  }
}

TEST(OpsDevice, AdaptivePoolAndUpsampleAreExact) {
  SKIP_WITHOUT_DEVICE();
  const int64_t n = 2, c = 3;
  for (int64_t h : {1, 7, 16}) {
    for (int64_t outH : {1, 5, 32}) {
      const int64_t w = h + 2, outW = outH + 1;
      const size_t in = static_cast<size_t>(n * c * h * w), out = static_cast<size_t>(n * c * outH * outW);
      const std::vector<float> x = randomVector(in, 10), g = randomVector(out, 11);
      DeviceBuffer<float> dx(x), dg(g), dOut(out), dGradIn(in);
      std::vector<float> cOut(out), cGradIn(in);
      aps::cpu::adaptiveAvgPool2dForward(cOut.data(), x.data(), n, c, h, w, outH, outW);
      aps::cuda::adaptiveAvgPool2dForward(dOut.get(), dx.get(), n, c, h, w, outH, outW);
      expectSameBits(dOut.download(), cOut, "adaptive avg pool");
      aps::cpu::adaptiveAvgPool2dBackward(cGradIn.data(), g.data(), n, c, h, w, outH, outW);
      aps::cuda::adaptiveAvgPool2dBackward(dGradIn.get(), dg.get(), n, c, h, w, outH, outW);
      expectSameBits(dGradIn.download(), cGradIn, "adaptive avg pool backward");
      aps::cpu::upsampleBilinearForward(cOut.data(), x.data(), n, c, h, w, outH, outW);
      aps::cuda::upsampleBilinearForward(dOut.get(), dx.get(), n, c, h, w, outH, outW);
      expectSameBits(dOut.download(), cOut, "upsample");
      aps::cpu::upsampleBilinearBackward(cGradIn.data(), g.data(), n, c, h, w, outH, outW);
      aps::cuda::upsampleBilinearBackward(dGradIn.get(), dg.get(), n, c, h, w, outH, outW);
      expectSameBits(dGradIn.download(), cGradIn, "upsample backward");
    }
  }
}

TEST(OpsDevice, CrossEntropyMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const aps::cpu::CrossEntropyShape s :
       {aps::cpu::CrossEntropyShape{64, 10, 1}, aps::cpu::CrossEntropyShape{3, 21, 1000}}) {
    const size_t total = static_cast<size_t>(s.n * s.c * s.spatial), positions = static_cast<size_t>(s.n * s.spatial);
    const std::vector<float> logits = randomVector(total, 12);
    std::vector<int64_t> targets(positions);
    for (size_t i = 0; i < positions; ++i) targets[i] = i % 11 == 4 ? 255 : static_cast<int64_t>((i * 7) % s.c);
    DeviceBuffer<float> dLogits(logits), dProbs(total), dGrad(total);
    DeviceBuffer<int64_t> dTargets(targets);
    std::vector<float> cProbs(total), cGrad(total);
    const float cLoss = aps::cpu::crossEntropyForward(cProbs.data(), logits.data(), targets.data(), s, 0.1f, 255);
    const float loss = aps::cuda::crossEntropyForward(dProbs.get(), dLogits.get(), dTargets.get(), s, 0.1f, 255);
    EXPECT_NEAR(loss, cLoss, 1e-6f * std::abs(cLoss));
    const std::vector<float> probs = dProbs.download();
    for (size_t i = 0; i < total; ++i) ASSERT_NEAR(probs[i], cProbs[i], 5e-7f * cProbs[i]) << i;
    // Backward from the same probabilities is exact.
    DeviceBuffer<float> dCpuProbs(cProbs);
    aps::cpu::crossEntropyBackward(cGrad.data(), cProbs.data(), targets.data(), s, 0.1f, 255, 2.0f);
    aps::cuda::crossEntropyBackward(dGrad.get(), dCpuProbs.get(), dTargets.get(), s, 0.1f, 255, 2.0f);
    expectSameBits(dGrad.download(), cGrad, "cross-entropy backward");
  }
}

TEST(OpsDevice, CrossEntropyRejectsABadTargetNamingIt) {
  SKIP_WITHOUT_DEVICE();
  const aps::cpu::CrossEntropyShape s{4, 3, 1};
  DeviceBuffer<float> dLogits(randomVector(12, 13)), dProbs(12);
  DeviceBuffer<int64_t> dTargets(std::vector<int64_t>{0, 1, 7, 3});
  try {
    aps::cuda::crossEntropyForward(dProbs.get(), dLogits.get(), dTargets.get(), s, 0.0f, -100);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("target 7 at position 2"), std::string::npos) << e.what();
  }
}

// Runs `steps` optimizer steps on the CPU and the same updates on the device.
struct OptimizerCase {
  std::vector<float> param, grad1, grad2;
  explicit OptimizerCase(size_t n)
      : param(randomVector(n, 14)), grad1(randomVector(n, 15)), grad2(randomVector(n, 16)) {}
};

TEST(OptimDevice, SgdUpdatesAreExact) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 50001;
  const OptimizerCase data(n);
  for (const aps::optim::SgdOptions& o :
       {aps::optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weightDecay = 1e-3},
        aps::optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .weightDecay = 5e-4},
        aps::optim::SgdOptions{.lr = 0.2}}) {
    Tensor w = Tensor::fromVector(data.param, {static_cast<int64_t>(n) / 3, 3}).setRequiresGrad();
    NamedTensors params{{"w", w}};
    aps::optim::Sgd sgd(params, o);
    DeviceBuffer<float> p(data.param), buf(n), g1(data.grad1), g2(data.grad2);
    aps::optim::kernels::SgdParams k{static_cast<float>(o.lr),
                                     static_cast<float>(o.momentum),
                                     static_cast<float>(o.dampening),
                                     static_cast<float>(o.weightDecay),
                                     o.nesterov,
                                     true};
    float* b = o.momentum != 0.0 ? buf.get() : nullptr;
    w.setGrad(Tensor::fromVector(data.grad1, w.sizes()));
    sgd.step();
    aps::optim::cuda::sgdUpdate(p.get(), g1.get(), b, static_cast<int64_t>(n), k);
    k.first = false;
    w.setGrad(Tensor::fromVector(data.grad2, w.sizes()));
    sgd.step();
    aps::optim::cuda::sgdUpdate(p.get(), g2.get(), b, static_cast<int64_t>(n), k);
    expectSameBits(p.download(), w.toVector<float>(), "sgd");
  }
}

TEST(OptimDevice, LarsUpdatesAndNormsAreExact) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 3 * 4096 + 17;
  const OptimizerCase data(n);
  const aps::optim::LarsOptions o{.lr = 1.0, .momentum = 0.9, .weightDecay = 1e-4};
  // 2-D, so LARS adapts it (1-D parameters are excluded by default).
  Tensor w2 = Tensor::fromVector(data.param, {1, static_cast<int64_t>(n)}).setRequiresGrad();
  NamedTensors params{{"w", w2}};
  aps::optim::Lars lars(params, o);
  DeviceBuffer<float> p(data.param), v(n), g1(data.grad1), g2(data.grad2);
  for (const DeviceBuffer<float>* g : {&g1, &g2}) {
    const std::vector<float>& grad = g == &g1 ? data.grad1 : data.grad2;
    w2.setGrad(Tensor::fromVector(grad, w2.sizes()));
    const double wNorm = aps::optim::cuda::l2Norm(p.get(), static_cast<int64_t>(n));
    const double gNorm = aps::optim::cuda::l2Norm(g->get(), static_cast<int64_t>(n));
    const double local = aps::optim::kernels::larsLocalLr(wNorm, gNorm, o.trustCoefficient, o.weightDecay, o.eps);
    EXPECT_EQ(local, lars.localLr(0));
    lars.step();
    aps::optim::cuda::larsUpdate(p.get(), g->get(), v.get(), static_cast<int64_t>(n), static_cast<float>(o.momentum),
                                 static_cast<float>(o.lr * local), static_cast<float>(o.weightDecay));
  }
  expectSameBits(p.download(), w2.toVector<float>(), "lars");
}

TEST(OptimDevice, AdamWUpdatesAreExact) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 40000;
  const OptimizerCase data(n);
  const aps::optim::AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weightDecay = 0.1};
  Tensor w = Tensor::fromVector(data.param, {200, 200}).setRequiresGrad();
  NamedTensors params{{"w", w}};
  aps::optim::AdamW adam(params, o);
  DeviceBuffer<float> p(data.param), m(n), v(n), g1(data.grad1), g2(data.grad2);
  int step = 0;
  for (const DeviceBuffer<float>* g : {&g1, &g2}) {
    w.setGrad(Tensor::fromVector(g == &g1 ? data.grad1 : data.grad2, w.sizes()));
    adam.step();
    ++step;
    // As AdamW::update derives them from the options and the step count.
    const double t = step;
    const aps::optim::kernels::AdamWParams k{static_cast<float>(o.beta1),
                                             static_cast<float>(o.beta2),
                                             static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, t))),
                                             static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t))),
                                             static_cast<float>(o.eps),
                                             static_cast<float>(1.0 - o.lr * o.weightDecay)};
    aps::optim::cuda::adamWUpdate(p.get(), g->get(), m.get(), v.get(), static_cast<int64_t>(n), k);
  }
  expectSameBits(p.download(), w.toVector<float>(), "adamw");
}

}  // namespace
