// Matrix products of the linear and matmul front ends (Kernels.h): Eigen's GEMM on row-major
// maps, one thread per product (EIGEN_DONT_PARALLELIZE), so the bits never depend on the
// thread count. The emulated device's cuBLAS calls these too.
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Kernels.h"

#include <Eigen/Core>

#include <algorithm>

namespace aps::cpu {

namespace {
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const Matrix>;
using Map = Eigen::Map<Matrix>;

// Column sums of g (rows, cols), each summed over the rows in order (the bias gradient).
void columnSums(float* out, const float* g, int64_t rows, int64_t cols) {
  parallelFor(cols, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(rows, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      float s = 0.0f;
      for (int64_t i = 0; i < rows; ++i) s += g[i * cols + j];
      out[j] = s;
    }
  });
}
}  // namespace

void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n) {
  Map(out, m, n).noalias() = ConstMap(a, m, k) * ConstMap(b, k, n);
}

void matmulBackward(float* gradA, float* gradB, const float* gradOut, const float* a, const float* b, int64_t m,
                    int64_t k, int64_t n) {
  if (gradA != nullptr) Map(gradA, m, k).noalias() = ConstMap(gradOut, m, n) * ConstMap(b, k, n).transpose();
  if (gradB != nullptr) Map(gradB, k, n).noalias() = ConstMap(a, m, k).transpose() * ConstMap(gradOut, m, n);
}

void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                   int64_t inFeatures, int64_t outFeatures) {
  auto y = Map(out, rows, outFeatures);
  y.noalias() = ConstMap(in, rows, inFeatures) * ConstMap(weight, outFeatures, inFeatures).transpose();
  if (bias != nullptr) y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, outFeatures);
}

void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures) {
  const ConstMap g(gradOut, rows, outFeatures);
  if (gradIn != nullptr) Map(gradIn, rows, inFeatures).noalias() = g * ConstMap(weight, outFeatures, inFeatures);
  if (gradWeight != nullptr) {
    Map(gradWeight, outFeatures, inFeatures).noalias() = g.transpose() * ConstMap(in, rows, inFeatures);
  }
  if (gradBias != nullptr) columnSums(gradBias, gradOut, rows, outFeatures);
}

}  // namespace aps::cpu
