// 2D convolution, forward and backward, dispatched by shape:
//  - 3x3 at unit stride with 8 to 64 channels and filters: Winograd F(2x2, 3x3)
//    (WinogradConv.h), for the forward pass and, through the flipped-filter identity below,
//    for the input gradient;
//  - maps wide enough, kernels at least as large as the stride: the in-place panel kernel
//    (PanelConv.h), for the forward pass and, at unit stride through the flipped-filter
//    identity below, for the input gradient;
//  - otherwise im2col + Eigen GEMM (Chellapilla et al., "High Performance Convolutional
//    Neural Networks for Document Processing", 2006), lowered over chunks of images so that
//    one GEMM covers several images while its column matrix stays in cache;
//  - weight gradients: an outer-product micro-kernel over the pixels (ConvWeightGrad.h), for
//    every shape.
// Chunks are sized from the shape alone and each GEMM runs on one thread, so the bits do not
// depend on the thread count.
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/ConvWeightGrad.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/PanelConv.h"
#include "framework/ops/cpu/Reduce.h"
#include "framework/ops/cpu/WinogradConv.h"
#include "framework/ops/cpu/Workspace.h"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>

namespace aps::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using ConstMatrixMap = Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Columns (output pixels over the images of a chunk) one forward GEMM aims for: large
// enough to amortise packing the weights, small enough that the column matrix stays in cache.
constexpr int64_t kTargetColumns = 1024;
// At least this many forward chunks per batch (when the batch allows) to share the work.
constexpr int64_t kMinChunks = 8;

// Workspace slots used inside the parallel loops; kSlotFlipped belongs to
// the calling thread (slots 4, 5 and 7 are taken by the panel convolution).
constexpr int kSlotColumns = 0;
constexpr int kSlotStaging = 1;
constexpr int kSlotGradColumns = 3;
constexpr int kSlotFlipped = 6;

struct ConvPlan {
  int64_t p = 0, q = 0, pq = 0, hw = 0;
  int64_t cg = 0, kg = 0, crs = 0;  // channels and filters per group; rows of the column matrix
  bool pointwise = false;           // 1x1, stride 1, no padding: an input plane is the column matrix
};

ConvPlan makePlan(const Conv2dShape& s) {
  APS_CHECK(s.n >= 1 && s.c >= 1 && s.h >= 1 && s.w >= 1 && s.k >= 1 && s.r >= 1 && s.s >= 1,
            "conv2d: sizes must be positive (n={}, c={}, h={}, w={}, k={}, r={}, s={})", s.n, s.c, s.h, s.w, s.k, s.r,
            s.s);
  APS_CHECK(s.strideH >= 1 && s.strideW >= 1 && s.dilationH >= 1 && s.dilationW >= 1 && s.padH >= 0 && s.padW >= 0,
            "conv2d: stride and dilation must be >= 1 and padding >= 0");
  APS_CHECK(s.groups >= 1 && s.c % s.groups == 0 && s.k % s.groups == 0,
            "conv2d: groups={} must divide in channels {} and out channels {}", s.groups, s.c, s.k);
  ConvPlan plan;
  plan.p = s.outH();
  plan.q = s.outW();
  APS_CHECK(plan.p >= 1 && plan.q >= 1, "conv2d: the {}x{} kernel does not fit the padded {}x{} input", s.r, s.s, s.h,
            s.w);
  plan.pq = plan.p * plan.q;
  plan.hw = s.h * s.w;
  plan.cg = s.c / s.groups;
  plan.kg = s.k / s.groups;
  plan.crs = plan.cg * s.r * s.s;
  plan.pointwise = s.r == 1 && s.s == 1 && s.strideH == 1 && s.strideW == 1 && s.padH == 0 && s.padW == 0;
  return plan;
}

// The output columns [lo, hi) whose input column q * stride + iw0 lies inside [0, w).
struct ColumnRange {
  int64_t lo, hi;
};
ColumnRange columnRange(int64_t iw0, int64_t stride, int64_t w, int64_t q) {
  const int64_t lo = std::min(q, iw0 >= 0 ? 0 : (-iw0 + stride - 1) / stride);
  const int64_t hi = w - 1 - iw0 < 0 ? 0 : (w - 1 - iw0) / stride + 1;
  return {lo, std::clamp(hi, lo, q)};
}

// col (crs, images * pq) <- the receptive fields of group g of `images` images starting at `in`.
void im2col(float* col, const float* in, int64_t images, int64_t g, const Conv2dShape& s, const ConvPlan& plan) {
  const int64_t ldc = images * plan.pq;
  for (int64_t cg = 0; cg < plan.cg; ++cg) {
    for (int64_t r = 0; r < s.r; ++r) {
      for (int64_t t = 0; t < s.s; ++t) {
        float* row = col + ((cg * s.r + r) * s.s + t) * ldc;
        const int64_t iw0 = t * s.dilationW - s.padW;  // input column of output column 0
        const auto [qlo, qhi] = columnRange(iw0, s.strideW, s.w, plan.q);
        for (int64_t b = 0; b < images; ++b) {
          const float* plane = in + (b * s.c + g * plan.cg + cg) * plan.hw;
          float* dst = row + b * plan.pq;
          for (int64_t p = 0; p < plan.p; ++p, dst += plan.q) {
            const int64_t ih = p * s.strideH - s.padH + r * s.dilationH;
            if (ih < 0 || ih >= s.h) {
              std::fill(dst, dst + plan.q, 0.0f);
              continue;
            }
            const float* src = plane + ih * s.w;
            std::fill(dst, dst + qlo, 0.0f);
            if (s.strideW == 1) {
              std::memcpy(dst + qlo, src + iw0 + qlo, static_cast<size_t>(qhi - qlo) * sizeof(float));
            } else {
              for (int64_t q = qlo; q < qhi; ++q) dst[q] = src[q * s.strideW + iw0];
            }
            std::fill(dst + qhi, dst + plan.q, 0.0f);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds the column gradients of group g back into `gradIn`, in row
// order (a fixed order, so the sums are deterministic).
void col2im(float* gradIn, const float* col, int64_t images, int64_t g, const Conv2dShape& s, const ConvPlan& plan) {
  const int64_t ldc = images * plan.pq;
  for (int64_t cg = 0; cg < plan.cg; ++cg) {
    for (int64_t r = 0; r < s.r; ++r) {
      for (int64_t t = 0; t < s.s; ++t) {
        const float* row = col + ((cg * s.r + r) * s.s + t) * ldc;
        const int64_t iw0 = t * s.dilationW - s.padW;
        const auto [qlo, qhi] = columnRange(iw0, s.strideW, s.w, plan.q);
        for (int64_t b = 0; b < images; ++b) {
          float* plane = gradIn + (b * s.c + g * plan.cg + cg) * plan.hw;
          const float* src = row + b * plan.pq;
          for (int64_t p = 0; p < plan.p; ++p, src += plan.q) {
            const int64_t ih = p * s.strideH - s.padH + r * s.dilationH;
            if (ih < 0 || ih >= s.h) continue;
            float* dst = plane + ih * s.w;
            if (s.strideW == 1) {
              float* d = dst + iw0;
              for (int64_t q = qlo; q < qhi; ++q) d[q] += src[q];
            } else {
              for (int64_t q = qlo; q < qhi; ++q) dst[q * s.strideW + iw0] += src[q];
            }
          }
        }
      }
    }
  }
}

// Runs body(chunk) for every chunk, spread over the aps threads; chunks are independent.
template <typename Body>
void forEachChunk(int64_t chunks, const Body& body) {
  const int threads = static_cast<int>(std::min<int64_t>(numThreads(), chunks));
  forEachTask(chunks, threads, [&](int64_t chunk, int) { body(chunk); });
}

// Forward by im2col over chunks of images and one Eigen GEMM per chunk: for strided and
// small-map shapes, where Eigen's vectorised packing beats gathering panels.
void forwardByColumns(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& s,
                      const ConvPlan& plan) {
  const int64_t imagesPerChunk =
      plan.pointwise ? 1
                     : std::max<int64_t>(1, std::min(kTargetColumns / plan.pq, (s.n + kMinChunks - 1) / kMinChunks));
  const int64_t chunks = (s.n + imagesPerChunk - 1) / imagesPerChunk;
  forEachChunk(chunks, [&](int64_t chunk) {
    const int64_t n0 = chunk * imagesPerChunk;
    const int64_t images = std::min(imagesPerChunk, s.n - n0);
    const int64_t cols = images * plan.pq;
    const float* image = in + n0 * s.c * plan.hw;
    float* col = plan.pointwise ? nullptr : Workspace::get(kSlotColumns, plan.crs * cols);
    float* staging = images > 1 ? Workspace::get(kSlotStaging, plan.kg * cols) : nullptr;
    for (int64_t g = 0; g < s.groups; ++g) {
      const float* colG = col;
      if (plan.pointwise) {
        colG = image + g * plan.cg * plan.hw;
      } else {
        im2col(col, image, images, g, s, plan);
      }
      ConstMatrixMap w(weight + g * plan.kg * plan.crs, plan.kg, plan.crs, Eigen::OuterStride<>(plan.crs));
      ConstMatrixMap x(colG, plan.crs, cols, Eigen::OuterStride<>(cols));
      if (images == 1) {
        MatrixMap y(out + (n0 * s.k + g * plan.kg) * plan.pq, plan.kg, cols, Eigen::OuterStride<>(cols));
        y.noalias() = w * x;
      } else {
        MatrixMap y(staging, plan.kg, cols, Eigen::OuterStride<>(cols));
        y.noalias() = w * x;
        for (int64_t b = 0; b < images; ++b) {
          for (int64_t k = 0; k < plan.kg; ++k) {
            std::memcpy(out + ((n0 + b) * s.k + g * plan.kg + k) * plan.pq, staging + k * cols + b * plan.pq,
                        static_cast<size_t>(plan.pq) * sizeof(float));
          }
        }
      }
    }
    if (bias != nullptr) {
      for (int64_t b = 0; b < images; ++b) {
        for (int64_t k = 0; k < s.k; ++k) {
          float* plane = out + ((n0 + b) * s.k + k) * plan.pq;
          const float v = bias[k];
          for (int64_t i = 0; i < plan.pq; ++i) plane[i] += v;
        }
      }
    }
  });
}

// The input gradient of a stride-1 convolution is itself a convolution (the "full"
// correlation of Dumoulin & Visin, "A guide to convolution arithmetic", 2016): of gradOut
// with the filters flipped in space and transposed in channels, padded by
// dilation * (kernel - 1) - pad. That runs on the fast forward path and needs no col2im.
bool gradInputIsConvolution(const Conv2dShape& s) {
  return s.strideH == 1 && s.strideW == 1 && s.padH <= s.dilationH * (s.r - 1) && s.padW <= s.dilationW * (s.s - 1);
}

void gradInputByConvolution(float* gradIn, const float* gradOut, const float* weight, const Conv2dShape& s,
                            const ConvPlan& plan) {
  Conv2dShape t = s;
  t.c = s.k;
  t.k = s.c;
  t.h = plan.p;
  t.w = plan.q;
  t.padH = s.dilationH * (s.r - 1) - s.padH;
  t.padW = s.dilationW * (s.s - 1) - s.padW;
  APS_ASSERT(t.outH() == s.h && t.outW() == s.w);
  if (detail::winogradSupported(t)) {
    detail::winogradConvForward(gradIn, gradOut, weight, nullptr, t, detail::PanelWeights::FlippedTransposed);
    return;
  }
  if (detail::panelConvSupported(t)) {  // flips the filters as it packs them
    detail::panelConvForward(gradIn, gradOut, weight, nullptr, t, detail::PanelWeights::FlippedTransposed);
    return;
  }
  const int64_t rs = s.r * s.s;
  // flipped (C, K/g, R, S): flipped[g*Cg + c][k][r][t] = weight[g*Kg + k][c][R-1-r][S-1-t]
  float* flipped = Workspace::get(kSlotFlipped, s.c * plan.kg * rs);
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int64_t k = 0; k < plan.kg; ++k) {
      for (int64_t c = 0; c < plan.cg; ++c) {
        const float* src = weight + ((g * plan.kg + k) * plan.cg + c) * rs;
        float* dst = flipped + ((g * plan.cg + c) * plan.kg + k) * rs;
        for (int64_t i = 0; i < rs; ++i) dst[i] = src[rs - 1 - i];
      }
    }
  }
  forwardByColumns(gradIn, gradOut, flipped, nullptr, t, makePlan(t));
}

// Any other stride: per image, gradCol = W^T * gradOut, then col2im.
void gradInputByColumns(float* gradIn, const float* gradOut, const float* weight, const Conv2dShape& s,
                        const ConvPlan& plan) {
  forEachChunk(s.n, [&](int64_t n) {
    const float* dyImage = gradOut + n * s.k * plan.pq;
    float* gradImage = gradIn + n * s.c * plan.hw;
    float* gradCol = plan.pointwise ? nullptr : Workspace::get(kSlotGradColumns, plan.crs * plan.pq);
    if (!plan.pointwise) std::fill(gradImage, gradImage + s.c * plan.hw, 0.0f);
    for (int64_t g = 0; g < s.groups; ++g) {
      ConstMatrixMap dy(dyImage + g * plan.kg * plan.pq, plan.kg, plan.pq, Eigen::OuterStride<>(plan.pq));
      ConstMatrixMap w(weight + g * plan.kg * plan.crs, plan.kg, plan.crs, Eigen::OuterStride<>(plan.crs));
      if (plan.pointwise) {
        MatrixMap dx(gradImage + g * plan.cg * plan.hw, plan.crs, plan.pq, Eigen::OuterStride<>(plan.pq));
        dx.noalias() = w.transpose() * dy;
      } else {
        MatrixMap dcol(gradCol, plan.crs, plan.pq, Eigen::OuterStride<>(plan.pq));
        dcol.noalias() = w.transpose() * dy;
        col2im(gradImage, gradCol, 1, g, s, plan);
      }
    }
  });
}

// Multiply-adds of a convolution (each counted as 2 FLOPs; forward, backward-data and
// backward-weight do the same number) and the bytes it must at least move: its three tensors.
double convFlops(const Conv2dShape& s) {
  return 2.0 * static_cast<double>(s.n * s.k * s.outH() * s.outW()) * static_cast<double>(s.c / s.groups * s.r * s.s);
}
double convBytes(const Conv2dShape& s) {
  return 4.0 * static_cast<double>(s.n * s.c * s.h * s.w + s.k * (s.c / s.groups) * s.r * s.s +
                                   s.n * s.k * s.outH() * s.outW());
}

}  // namespace

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape) {
  const profile::Scope scope("conv.forward", convFlops(shape), convBytes(shape));
  const ConvPlan plan = makePlan(shape);
  if (detail::winogradSupported(shape)) {
    detail::winogradConvForward(out, in, weight, bias, shape);
  } else if (detail::panelConvSupported(shape)) {
    detail::panelConvForward(out, in, weight, bias, shape);
  } else {
    forwardByColumns(out, in, weight, bias, shape, plan);
  }
}

void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const Conv2dShape& shape) {
  const ConvPlan plan = makePlan(shape);
  const Conv2dShape& s = shape;
  if (gradBias != nullptr) {
    const profile::Scope scope("conv.backward_bias", static_cast<double>(s.n * s.k * plan.pq),
                               4.0 * static_cast<double>(s.n * s.k * plan.pq));
    // Per filter: per-plane fixed-order sums, accumulated over images in order.
    parallelFor(s.k, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        double total = 0.0;
        for (int64_t n = 0; n < s.n; ++n) total += detail::sum(gradOut + (n * s.k + k) * plan.pq, plan.pq);
        gradBias[k] = static_cast<float>(total);
      }
    });
  }
  if (gradIn != nullptr) {
    const profile::Scope scope("conv.backward_data", convFlops(s), convBytes(s));
    if (gradInputIsConvolution(s)) {
      gradInputByConvolution(gradIn, gradOut, weight, s, plan);
    } else {
      gradInputByColumns(gradIn, gradOut, weight, s, plan);
    }
  }
  if (gradWeight != nullptr) {
    const profile::Scope scope("conv.backward_weight", convFlops(s), convBytes(s));
    detail::convWeightGrad(gradWeight, gradOut, in, s);
  }
}

}  // namespace aps::cpu
