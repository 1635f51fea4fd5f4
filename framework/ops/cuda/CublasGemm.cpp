#include "framework/ops/cuda/CublasGemm.h"

#include "framework/core/Error.h"
#include "framework/ops/cuda/Kernels.h"
#include "framework/tensor/cuda/CudaAllocator.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

// cuBLAS is column-major; a row-major (r, c) matrix is the column-major (c, r) matrix with the
// same bytes. So row-major C = A * B is computed as column-major C^T = B^T * A^T: the same
// call with the operands swapped, no transposes materialised.
namespace aps::cuda {

namespace {

void check(cublasStatus_t status, const char* what) {
  APS_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuBLAS: {} failed: {}", what, cublasGetStatusString(status));
}
#define APS_CUBLAS(expr) check((expr), #expr)

int narrow(int64_t v) {
  APS_CHECK(v >= 0 && v <= INT32_MAX, "cuBLAS: dimension {} does not fit a 32-bit int", v);
  return static_cast<int>(v);
}

struct DeviceState {
  cublasHandle_t handle = nullptr;
  float* ones = nullptr;  // a vector of ones for bias sums and bias adds, grown on demand
  int64_t onesLength = 0;
};

std::mutex stateMutex;
std::map<int, DeviceState> states;

// The device's handle on `stream` with the requested math mode, and a vector of >= n ones.
cublasHandle_t prepare(const GemmOptions& options, StreamHandle stream, int64_t onesNeeded, const float** ones) {
  const int device = currentDevice();
  std::lock_guard<std::mutex> lock(stateMutex);
  DeviceState& s = states[device];
  if (s.handle == nullptr) APS_CUBLAS(cublasCreate(&s.handle));
  APS_CUBLAS(cublasSetStream(s.handle, static_cast<cudaStream_t>(stream)));
  APS_CUBLAS(cublasSetMathMode(s.handle, options.allowTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  if (onesNeeded > s.onesLength) {
    auto& allocator = CudaAllocator::instance();
    if (s.ones != nullptr) allocator.release(s.ones, static_cast<size_t>(s.onesLength) * sizeof(float), device);
    s.ones = static_cast<float*>(allocator.allocate(static_cast<size_t>(onesNeeded) * sizeof(float), device));
    s.onesLength = onesNeeded;
    fillFloatAsync(s.ones, onesNeeded, 1.0f, stream);
  }
  if (ones != nullptr) *ones = s.ones;
  return s.handle;
}

// C (m, n) = op(A) (m, k) * op(B) (k, n), column-major, into float32 C: cublasSgemm, or with
// 16-bit operands cublasGemmEx on 2-byte copies of A and B (exact: they hold format values),
// fp32 compute, float32 result.
void gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
          int lda, const float* b, int ldb, float* c, int ldc, precision::ComputeFormat format, StreamHandle stream) {
  const float one = 1.0f, zero = 0.0f;
  if (format == precision::ComputeFormat::Fp32) {
    APS_CUBLAS(cublasSgemm(handle, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc));
    return;
  }
  const int device = currentDevice();
  const int64_t aCount = int64_t{lda} * (ta == CUBLAS_OP_N ? k : m);
  const int64_t bCount = int64_t{ldb} * (tb == CUBLAS_OP_N ? n : k);
  DeviceScratch ah(static_cast<size_t>(aCount) * 2, device), bh(static_cast<size_t>(bCount) * 2, device);
  toSixteenBit(ah.data(), a, aCount, format, stream);
  toSixteenBit(bh.data(), b, bCount, format, stream);
  const cudaDataType_t type = format == precision::ComputeFormat::Fp16 ? CUDA_R_16F : CUDA_R_16BF;
  APS_CUBLAS(cublasGemmEx(handle, ta, tb, m, n, k, &one, ah.data(), type, lda, bh.data(), type, ldb, &zero, c,
                          CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n, const GemmOptions& options,
            StreamHandle stream) {
  cublasHandle_t handle = prepare(options, stream, 0, nullptr);
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, narrow(n), narrow(m), narrow(k), b, narrow(n), a, narrow(k), out, narrow(n),
       options.format, stream);
}

void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                   int64_t inFeatures, int64_t outFeatures, const GemmOptions& options, StreamHandle stream) {
  const float* ones = nullptr;
  cublasHandle_t handle = prepare(options, stream, bias != nullptr ? rows : 0, &ones);
  const int o = narrow(outFeatures), i = narrow(inFeatures), r = narrow(rows);
  const float one = 1.0f;
  // out^T (o, r) = weight (o, i) [column-major (i, o), transposed] * in^T (i, r)
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, o, r, i, weight, i, in, i, out, o, options.format, stream);
  // out^T += bias * ones^T (a rank-one update)
  if (bias != nullptr) APS_CUBLAS(cublasSger(handle, o, r, &one, bias, 1, ones, 1, out, o));
}

void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures,
                    const GemmOptions& options, StreamHandle stream) {
  const float* ones = nullptr;
  cublasHandle_t handle = prepare(options, stream, gradBias != nullptr ? rows : 0, &ones);
  const int o = narrow(outFeatures), i = narrow(inFeatures), r = narrow(rows);
  const float one = 1.0f, zero = 0.0f;
  // gradIn^T (i, r) = weight^T (i, o) * gradOut^T (o, r)
  if (gradIn != nullptr)
    gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, i, r, o, weight, i, gradOut, o, gradIn, i, options.format, stream);
  // gradWeight^T (i, o) = in^T (i, r) * gradOut (r, o)
  if (gradWeight != nullptr) {
    gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, i, o, r, in, i, gradOut, o, gradWeight, i, options.format, stream);
  }
  // gradBias (o) = gradOut^T (o, r) * ones (r)
  if (gradBias != nullptr) {
    APS_CUBLAS(cublasSgemv(handle, CUBLAS_OP_N, o, r, &one, gradOut, o, ones, 1, &zero, gradBias, 1));
  }
}

}  // namespace aps::cuda
