// Convolution as im2col + GEMM (Chellapilla et al., "High Performance Convolutional Neural
// Networks for Document Processing", 2006), lowered over chunks of images so that one GEMM
// covers several images while its column matrix stays in cache. Chunks are sized from the
// shape alone and each GEMM runs on one thread, so the bits do not depend on the thread count.
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/Reduce.h"
#include "framework/ops/cpu/Workspace.h"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>

namespace aps::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using ConstMatrixMap = Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Columns (output pixels over the images of a chunk) one GEMM aims for: large enough to
// amortise packing the weights, small enough that the column matrix stays in L2/L3.
constexpr int64_t kTargetColumns = 1024;
// At least this many chunks per batch (when the batch allows) so two or more threads share
// the work evenly.
constexpr int64_t kMinChunks = 8;

// Workspace slots used inside the parallel loops; kSlotPartials belongs to the calling thread.
constexpr int kSlotColumns = 0;
constexpr int kSlotStaging = 1;
constexpr int kSlotPartials = 2;
constexpr int kSlotGradColumns = 3;

struct ConvPlan {
  int64_t p = 0, q = 0, pq = 0, hw = 0;
  int64_t cg = 0, kg = 0, crs = 0;  // channels and filters per group; rows of the column matrix
  bool pointwise = false;           // 1x1, stride 1, no padding: an input plane is the column matrix
  int64_t imagesPerChunk = 1, chunks = 1;
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
  if (plan.pointwise) {
    plan.imagesPerChunk = 1;
  } else {
    const int64_t byCache = std::max<int64_t>(1, kTargetColumns / plan.pq);
    const int64_t byBalance = (s.n + kMinChunks - 1) / kMinChunks;
    plan.imagesPerChunk = std::max<int64_t>(1, std::min(byCache, byBalance));
  }
  plan.chunks = (s.n + plan.imagesPerChunk - 1) / plan.imagesPerChunk;
  return plan;
}

// col (crs, images * pq) <- the receptive fields of group g of `images` images starting at `in`.
void im2col(float* col, const float* in, int64_t images, int64_t g, const Conv2dShape& s, const ConvPlan& plan) {
  const int64_t ldc = images * plan.pq;
  for (int64_t cg = 0; cg < plan.cg; ++cg) {
    for (int64_t r = 0; r < s.r; ++r) {
      for (int64_t t = 0; t < s.s; ++t) {
        float* row = col + ((cg * s.r + r) * s.s + t) * ldc;
        const int64_t iw0 = t * s.dilationW - s.padW;  // input column of output column 0
        const int64_t qlo = s.strideW == 1 ? std::clamp<int64_t>(-iw0, 0, plan.q) : 0;
        const int64_t qhi = s.strideW == 1 ? std::clamp<int64_t>(s.w - iw0, qlo, plan.q) : 0;
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
            if (s.strideW == 1) {
              std::fill(dst, dst + qlo, 0.0f);
              std::memcpy(dst + qlo, src + iw0 + qlo, static_cast<size_t>(qhi - qlo) * sizeof(float));
              std::fill(dst + qhi, dst + plan.q, 0.0f);
            } else {
              for (int64_t q = 0; q < plan.q; ++q) {
                const int64_t iw = q * s.strideW + iw0;
                dst[q] = iw >= 0 && iw < s.w ? src[iw] : 0.0f;
              }
            }
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
        const int64_t qlo = s.strideW == 1 ? std::clamp<int64_t>(-iw0, 0, plan.q) : 0;
        const int64_t qhi = s.strideW == 1 ? std::clamp<int64_t>(s.w - iw0, qlo, plan.q) : 0;
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
              for (int64_t q = 0; q < plan.q; ++q) {
                const int64_t iw = q * s.strideW + iw0;
                if (iw >= 0 && iw < s.w) dst[iw] += src[q];
              }
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
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) body(chunk);
}

}  // namespace

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape) {
  const ConvPlan plan = makePlan(shape);
  const Conv2dShape& s = shape;
  forEachChunk(plan.chunks, [&](int64_t chunk) {
    const int64_t n0 = chunk * plan.imagesPerChunk;
    const int64_t images = std::min(plan.imagesPerChunk, s.n - n0);
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

void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const Conv2dShape& shape) {
  const ConvPlan plan = makePlan(shape);
  const Conv2dShape& s = shape;
  if (gradBias != nullptr) {
    // Per filter: per-plane fixed-order sums, accumulated over images in order.
    parallelFor(s.k, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        double total = 0.0;
        for (int64_t n = 0; n < s.n; ++n) total += detail::sum(gradOut + (n * s.k + k) * plan.pq, plan.pq);
        gradBias[k] = static_cast<float>(total);
      }
    });
  }
  if (gradIn == nullptr && gradWeight == nullptr) return;
  const int64_t weightSize = s.k * plan.crs;
  // One partial weight gradient per chunk, summed in chunk order below.
  float* partials = gradWeight != nullptr ? Workspace::get(kSlotPartials, plan.chunks * weightSize) : nullptr;
  forEachChunk(plan.chunks, [&](int64_t chunk) {
    const int64_t n0 = chunk * plan.imagesPerChunk;
    const int64_t images = std::min(plan.imagesPerChunk, s.n - n0);
    const int64_t cols = images * plan.pq;
    const float* image = in + n0 * s.c * plan.hw;
    // gradOut of the chunk as one (K, images * pq) matrix.
    const float* gOut = gradOut + n0 * s.k * plan.pq;
    if (images > 1) {
      float* staging = Workspace::get(kSlotStaging, s.k * cols);
      for (int64_t b = 0; b < images; ++b) {
        for (int64_t k = 0; k < s.k; ++k) {
          std::memcpy(staging + k * cols + b * plan.pq, gOut + (b * s.k + k) * plan.pq,
                      static_cast<size_t>(plan.pq) * sizeof(float));
        }
      }
      gOut = staging;
    }
    float* gradImage = gradIn != nullptr ? gradIn + n0 * s.c * plan.hw : nullptr;
    if (gradImage != nullptr && !plan.pointwise) std::fill(gradImage, gradImage + images * s.c * plan.hw, 0.0f);
    float* col = plan.pointwise || gradWeight == nullptr ? nullptr : Workspace::get(kSlotColumns, plan.crs * cols);
    float* gradCol = plan.pointwise || gradIn == nullptr ? nullptr : Workspace::get(kSlotGradColumns, plan.crs * cols);
    for (int64_t g = 0; g < s.groups; ++g) {
      ConstMatrixMap dy(gOut + g * plan.kg * cols, plan.kg, cols, Eigen::OuterStride<>(cols));
      ConstMatrixMap w(weight + g * plan.kg * plan.crs, plan.kg, plan.crs, Eigen::OuterStride<>(plan.crs));
      if (gradWeight != nullptr) {
        const float* colG = col;
        if (plan.pointwise) {
          colG = image + g * plan.cg * plan.hw;
        } else {
          im2col(col, image, images, g, s, plan);
        }
        ConstMatrixMap x(colG, plan.crs, cols, Eigen::OuterStride<>(cols));
        MatrixMap dw(partials + chunk * weightSize + g * plan.kg * plan.crs, plan.kg, plan.crs,
                     Eigen::OuterStride<>(plan.crs));
        dw.noalias() = dy * x.transpose();
      }
      if (gradIn != nullptr) {
        if (plan.pointwise) {
          MatrixMap dx(gradImage + g * plan.cg * plan.hw, plan.crs, cols, Eigen::OuterStride<>(cols));
          dx.noalias() = w.transpose() * dy;
        } else {
          MatrixMap dcol(gradCol, plan.crs, cols, Eigen::OuterStride<>(cols));
          dcol.noalias() = w.transpose() * dy;
          col2im(gradImage, gradCol, images, g, s, plan);
        }
      }
    }
  });
  if (gradWeight != nullptr) {
    parallelFor(weightSize, 1024, [&](int64_t i0, int64_t i1) {
      std::copy(partials + i0, partials + i1, gradWeight + i0);
      for (int64_t chunk = 1; chunk < plan.chunks; ++chunk) {
        const float* part = partials + chunk * weightSize;
        for (int64_t i = i0; i < i1; ++i) gradWeight[i] += part[i];
      }
    });
  }
}

}  // namespace aps::cpu
