// The kernels' bits must not change between runs, nor with the thread count: work is split
// over output elements and reductions run in fixed-size blocks combined in a fixed order.
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Kernels.h"
#include "tests/common/RandomVector.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <vector>

namespace {

using aps::testsupport::randomVector;

// Runs `compute` (which returns every output it produced, concatenated) with 1, 2 and 3
// threads, twice each, and expects identical bits every time.
template <typename Compute>
void expectSameBitsForAnyThreadCount(const Compute& compute) {
  const int saved = aps::numThreads();
  aps::setNumThreads(1);
  const std::vector<float> reference = compute();
  for (int threads : {1, 2, 3}) {
    aps::setNumThreads(threads);
    for (int repeat = 0; repeat < 2; ++repeat) {
      const std::vector<float> result = compute();
      ASSERT_EQ(result.size(), reference.size());
      // Compare bits, not values: NaN-safe and exact.
      EXPECT_EQ(0, std::memcmp(result.data(), reference.data(), result.size() * sizeof(float)))
          << threads << " threads, repeat " << repeat;
    }
  }
  aps::setNumThreads(saved);
}

void append(std::vector<float>& all, const std::vector<float>& part) {
  all.insert(all.end(), part.begin(), part.end());
}

TEST(Determinism, Conv2dForwardAndBackward) {
  // 19 images: the batch is split into several multi-image chunks. 6 channels and filters at
  // unit stride take the in-place panel path; stride 2 the im2col + Eigen path, whose forward
  // batches several images per GEMM. 5 images: the panel kernel pads and computes an image per
  // task on 1 and 2 threads, and pads the whole batch first on 3 (fewer than two images per
  // thread). The panel kernel stacks small maps several to a block where that wastes fewer
  // columns (8x8: 4 images per block on 1 and 2 threads, the last block short, one on 3; 9x9
  // with groups: 3 on 1, 2 and 3). 8 and 16 channels and filters at unit stride, one group:
  // Winograd F(2x2, 3x3), whose work items take whole tile rows across images.
  for (auto [groups, stride, images, mapH, mapW, channels] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 1, 19, 14, 13, 6},
        {2, 1, 19, 14, 13, 6},
        {1, 2, 19, 14, 13, 6},
        {2, 2, 19, 14, 13, 6},
        {1, 1, 5, 14, 13, 6},
        {2, 1, 5, 14, 13, 6},
        {1, 1, 19, 8, 8, 6},
        {2, 1, 19, 9, 9, 6},
        {1, 1, 19, 14, 13, 8},
        {1, 1, 19, 9, 9, 16},
        {1, 1, 19, 8, 8, 8}}) {
    aps::cpu::Conv2dShape s;
    s.n = images, s.c = channels, s.h = mapH, s.w = mapW, s.k = channels, s.r = 3, s.s = 3, s.padH = 1, s.padW = 1,
    s.groups = groups;
    s.strideH = s.strideW = stride;
    const std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 1);
    const std::vector<float> w = randomVector(static_cast<size_t>(s.k * s.c / groups * 9), 2);
    const std::vector<float> b = randomVector(static_cast<size_t>(s.k), 3);
    const std::vector<float> g = randomVector(static_cast<size_t>(s.n * s.k * s.outH() * s.outW()), 4);
    expectSameBitsForAnyThreadCount([&] {
      std::vector<float> y(g.size()), gx(x.size()), gw(w.size()), gb(b.size());
      aps::cpu::conv2dForward(y.data(), x.data(), w.data(), b.data(), s);
      aps::cpu::conv2dBackward(gx.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), s);
      std::vector<float> all;
      for (const auto* part : {&y, &gx, &gw, &gb}) append(all, *part);
      return all;
    });
  }
}

void expectBatchNormSameBitsForAnyThreadCount(const aps::cpu::BatchNormShape& s) {
  const size_t size = static_cast<size_t>(s.n * s.c * s.hw);
  const size_t c = static_cast<size_t>(s.c);
  const std::vector<float> x = randomVector(size, 5), g = randomVector(size, 6);
  const std::vector<float> gamma = randomVector(c, 7), beta = randomVector(c, 8);
  expectSameBitsForAnyThreadCount([&] {
    std::vector<float> y(size), mean(c), invStd(c), runningMean(c, 0.0f), runningVar(c, 1.0f);
    aps::cpu::batchNormForwardTrain(y.data(), mean.data(), invStd.data(), runningMean.data(), runningVar.data(),
                                    x.data(), gamma.data(), beta.data(), s, 0.1f, 1e-5f);
    std::vector<float> gx(size), gg(c), gb(c);
    aps::cpu::batchNormBackward(gx.data(), gg.data(), gb.data(), g.data(), x.data(), gamma.data(), mean.data(),
                                invStd.data(), s);
    std::vector<float> all;
    for (const auto* part : {&y, &mean, &invStd, &runningMean, &runningVar, &gx, &gg, &gb}) append(all, *part);
    return all;
  });
}

TEST(Determinism, BatchNormStatisticsAndGradients) {
  // Batch norm's passes split the (n, c) planes over the threads in chunks of about 16 K
  // values: 16 x 6 planes of 49 values are one chunk; 7 x 5 planes of 3000 values split into
  // 2 or 3 chunks that begin inside an image, at a channel other than 0.
  for (const aps::cpu::BatchNormShape s : {aps::cpu::BatchNormShape{16, 6, 49}, aps::cpu::BatchNormShape{7, 5, 3000}}) {
    expectBatchNormSameBitsForAnyThreadCount(s);
  }
}

TEST(Determinism, CrossEntropyLossAndGradient) {
  const aps::cpu::CrossEntropyShape s{8, 5, 300};
  const std::vector<float> logits = randomVector(static_cast<size_t>(s.n * s.c * s.spatial), 9);
  std::vector<int64_t> targets(static_cast<size_t>(s.n * s.spatial));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 7 == 0 ? 255 : static_cast<int64_t>(i % 5);
  expectSameBitsForAnyThreadCount([&] {
    std::vector<float> probs(logits.size()), grad(logits.size());
    const float loss = aps::cpu::crossEntropyForward(probs.data(), logits.data(), targets.data(), s, 0.1f, 255);
    aps::cpu::crossEntropyBackward(grad.data(), probs.data(), targets.data(), s, 0.1f, 255, 1.0f);
    std::vector<float> all = {loss};
    append(all, probs);
    append(all, grad);
    return all;
  });
}

TEST(Determinism, PoolingAndUpsampling) {
  aps::cpu::Pool2dShape s;
  s.n = 6, s.c = 5, s.h = 11, s.w = 9, s.kernelH = 3, s.kernelW = 3, s.strideH = 2, s.strideW = 2, s.padH = 1,
  s.padW = 1;
  const std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 10);
  const std::vector<float> g = randomVector(static_cast<size_t>(s.n * s.c * s.outH() * s.outW()), 11);
  const std::vector<float> gUp = randomVector(static_cast<size_t>(s.n * s.c * 20 * 17), 12);
  expectSameBitsForAnyThreadCount([&] {
    std::vector<float> maxOut(g.size()), avgOut(g.size()), gxMax(x.size()), gxAvg(x.size()), up(gUp.size()),
        gxUp(x.size());
    std::vector<int64_t> argmax(g.size());
    aps::cpu::maxPool2dForward(maxOut.data(), argmax.data(), x.data(), s);
    aps::cpu::maxPool2dBackward(gxMax.data(), g.data(), argmax.data(), s);
    aps::cpu::avgPool2dForward(avgOut.data(), x.data(), s, true);
    aps::cpu::avgPool2dBackward(gxAvg.data(), g.data(), s, true);
    aps::cpu::upsampleBilinearForward(up.data(), x.data(), s.n, s.c, s.h, s.w, 20, 17);
    aps::cpu::upsampleBilinearBackward(gxUp.data(), gUp.data(), s.n, s.c, s.h, s.w, 20, 17);
    std::vector<float> all;
    for (const auto* part : {&maxOut, &avgOut, &gxMax, &gxAvg, &up, &gxUp}) append(all, *part);
    return all;
  });
}

}  // namespace
