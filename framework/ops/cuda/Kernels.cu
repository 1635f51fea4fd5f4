// CUDA launches around the shared op arithmetic (framework/ops/kernels/*.h): each kernel
// maps threads to outputs (or, for backward passes, to input elements) and calls the same
// functions the CPU kernels call. Reductions use fixed block and grid sizes and a fixed
// combination order, so every result is the same run to run.
#include "framework/ops/cuda/Kernels.h"

#include "framework/ops/cuda/Errors.h"
#include "framework/ops/kernels/BatchNorm.h"
#include "framework/ops/kernels/CrossEntropy.h"
#include "framework/ops/kernels/Elementwise.h"
#include "framework/ops/kernels/Pooling.h"
#include "framework/ops/kernels/Reduce.h"
#include "framework/ops/kernels/Upsample.h"
#include "framework/tensor/cuda/CudaCheck.h"
#include "framework/tensor/cuda/Launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace aps::cuda {

namespace {

namespace k = aps::kernels;

using launch::firstIndex;
using launch::gridFor;
using launch::gridStride;
using launch::kThreads;

void checkLaunch() { APS_CUDA_CHECK(cudaGetLastError()); }

// ---- element-wise ----------------------------------------------------------------------

struct AddOp {
  __device__ float operator()(float x, float y) const { return k::add(x, y); }
};
struct SubOp {
  __device__ float operator()(float x, float y) const { return k::sub(x, y); }
};
struct MulOp {
  __device__ float operator()(float x, float y) const { return k::mul(x, y); }
};
struct ReluBackwardOp {
  __device__ float operator()(float g, float y) const { return k::reluBackward(g, y); }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float x) const { return k::scale(x, s); }
};
struct AddScalarOp {
  float s;
  __device__ float operator()(float x) const { return k::addScalar(x, s); }
};
struct ReluOp {
  __device__ float operator()(float x) const { return k::relu(x); }
};

template <class Op>
__global__ void binaryKernel(float* out, const float* a, const float* b, int64_t n, Op op) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) out[i] = op(a[i], b[i]);
}

template <class Op>
__global__ void unaryKernel(float* out, const float* x, int64_t n, Op op) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) out[i] = op(x[i]);
}

template <class Op>
void launchBinary(float* out, const float* a, const float* b, int64_t n, StreamHandle stream, Op op) {
  if (n <= 0) return;
  binaryKernel<<<gridFor(n), kThreads, 0, stream>>>(out, a, b, n, op);
  checkLaunch();
}

template <class Op>
void launchUnary(float* out, const float* x, int64_t n, StreamHandle stream, Op op) {
  if (n <= 0) return;
  unaryKernel<<<gridFor(n), kThreads, 0, stream>>>(out, x, n, op);
  checkLaunch();
}

// ---- batch norm ------------------------------------------------------------------------

// One block per channel: kThreads / kLanes images at a time, kLanes threads per image plane,
// each adding its lane of the plane as the CPU's lane loop does; the lanes are combined in
// the CPU's order and the planes' float sums added in image order in double.
constexpr int kPlanesPerRound = kThreads / k::kLanes;

// Sums term(plane offset, i) over channel c's planes; every thread of the block gets the
// result. Two sums at once (batch norm backward needs sum dy and sum dy * (x - mean)).
template <class Term>
__device__ void channelSums(const BatchNormShape& s, int64_t c, Term term, double* total0, double* total1) {
  __shared__ float lanes0[kPlanesPerRound][k::kLanes];
  __shared__ float lanes1[kPlanesPerRound][k::kLanes];
  __shared__ double sums[2];
  const int lane = static_cast<int>(threadIdx.x) % k::kLanes;
  const int group = static_cast<int>(threadIdx.x) / k::kLanes;
  if (threadIdx.x == 0) sums[0] = sums[1] = 0.0;
  for (int64_t n0 = 0; n0 < s.n; n0 += kPlanesPerRound) {
    const int64_t n = n0 + group;
    float acc0 = 0.0f, acc1 = 0.0f;
    if (n < s.n) {
      const int64_t offset = (n * s.c + c) * s.hw;
      for (int64_t i = lane; i < s.hw; i += k::kLanes) term(offset + i, acc0, acc1);
    }
    lanes0[group][lane] = acc0;
    lanes1[group][lane] = acc1;
    __syncthreads();
    if (lane == 0 && n < s.n) {
      k::combineLanes(lanes0[group]);
      k::combineLanes(lanes1[group]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int g = 0; g < kPlanesPerRound && n0 + g < s.n; ++g) {
        sums[0] += static_cast<double>(lanes0[g][0]);
        sums[1] += static_cast<double>(lanes1[g][0]);
      }
    }
    __syncthreads();
  }
  *total0 = sums[0];
  *total1 = sums[1];
  __syncthreads();  // sums may be reused by the next call
}

__global__ void batchNormTrainKernel(float* out, float* saveMean, float* saveInvStd, float* runningMean,
                                     float* runningVar, const float* in, const float* gamma, const float* beta,
                                     BatchNormShape s, float momentum, float eps) {
  const int64_t c = blockIdx.x;
  const int64_t count = s.n * s.hw;
  double total = 0.0, unused = 0.0;
  channelSums(
      s, c, [in](int64_t i, float& a, float&) { a += in[i]; }, &total, &unused);
  const float mean = k::batchNormMean(total, count);
  double squares = 0.0;
  channelSums(
      s, c, [in, mean](int64_t i, float& a, float&) { a = k::addSquaredDeviation(a, in[i], mean); }, &squares, &unused);
  const float invStd = k::batchNormInvStd(squares, count, eps);
  if (threadIdx.x == 0) {
    if (saveMean != nullptr) saveMean[c] = mean;
    if (saveInvStd != nullptr) saveInvStd[c] = invStd;
    if (runningMean != nullptr) runningMean[c] = k::runningStatUpdate(runningMean[c], mean, momentum);
    if (runningVar != nullptr) {
      runningVar[c] = k::runningStatUpdate(runningVar[c], k::batchNormUnbiasedVar(squares, count), momentum);
    }
  }
  const k::BatchNormAffine a = k::batchNormAffine(gamma, beta, c, mean, invStd);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t index = ((j / s.hw) * s.c + c) * s.hw + j % s.hw;
    out[index] = k::batchNormApply(in[index], a);
  }
}

__global__ void batchNormEvalKernel(float* out, const float* in, const float* gamma, const float* beta,
                                    const float* runningMean, const float* runningVar, BatchNormShape s, float eps) {
  const int64_t total = s.n * s.c * s.hw;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t c = (i / s.hw) % s.c;
    const float invStd = k::batchNormEvalInvStd(runningVar[c], eps);
    out[i] = k::batchNormApply(in[i], k::batchNormAffine(gamma, beta, c, runningMean[c], invStd));
  }
}

__global__ void batchNormBackwardKernel(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut,
                                        const float* in, const float* gamma, const float* saveMean,
                                        const float* saveInvStd, BatchNormShape s) {
  const int64_t c = blockIdx.x;
  const int64_t count = s.n * s.hw;
  const float mean = saveMean[c];
  const float invStd = saveInvStd[c];
  double sumG = 0.0, sumGX = 0.0;
  channelSums(
      s, c,
      [gradOut, in, mean](int64_t i, float& a, float& b) {
        a += gradOut[i];
        b = k::addGradDeviation(b, gradOut[i], in[i], mean);
      },
      &sumG, &sumGX);
  if (threadIdx.x == 0) {
    if (gradBeta != nullptr) gradBeta[c] = k::batchNormGradBeta(sumG);
    if (gradGamma != nullptr) gradGamma[c] = k::batchNormGradGamma(sumGX, invStd);
  }
  if (gradIn == nullptr) return;
  const k::BatchNormGrad g = k::batchNormGrad(sumG, sumGX, count, gamma, c, mean, invStd);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t index = ((j / s.hw) * s.c + c) * s.hw + j % s.hw;
    gradIn[index] = k::batchNormGradIn(gradOut[index], in[index], g);
  }
}

// ---- pooling ---------------------------------------------------------------------------

__global__ void maxPoolForwardKernel(float* out, int64_t* argmax, const float* in, Pool2dShape s, int64_t p,
                                     int64_t q) {
  const int64_t total = s.n * s.c * p * q;
  for (int64_t o = firstIndex(); o < total; o += gridStride()) {
    const int64_t plane = o / (p * q), oh = (o / q) % p, ow = o % q;
    const k::Window wh = k::poolWindow(oh, s.strideH, s.padH, s.kernelH, s.h);
    const k::Window ww = k::poolWindow(ow, s.strideW, s.padW, s.kernelW, s.w);
    int64_t index = 0;
    out[o] = k::windowMax(in + plane * s.h * s.w, s.w, wh, ww, &index);
    if (argmax != nullptr) argmax[o] = index;
  }
}

__global__ void maxPoolBackwardKernel(float* gradIn, const float* gradOut, const int64_t* argmax, Pool2dShape s,
                                      int64_t p, int64_t q) {
  const int64_t total = s.n * s.c * s.h * s.w;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t plane = i / (s.h * s.w), ih = (i / s.w) % s.h, iw = i % s.w;
    gradIn[i] = k::maxPoolGradAt(gradOut + plane * p * q, argmax + plane * p * q, ih, iw, s.w, p, q, s.kernelH,
                                 s.kernelW, s.strideH, s.strideW, s.padH, s.padW);
  }
}

__global__ void avgPoolForwardKernel(float* out, const float* in, Pool2dShape s, int64_t p, int64_t q,
                                     bool countIncludePad) {
  const int64_t total = s.n * s.c * p * q;
  for (int64_t o = firstIndex(); o < total; o += gridStride()) {
    const int64_t plane = o / (p * q), oh = (o / q) % p, ow = o % q;
    const k::Window wh = k::poolWindow(oh, s.strideH, s.padH, s.kernelH, s.h);
    const k::Window ww = k::poolWindow(ow, s.strideW, s.padW, s.kernelW, s.w);
    const int64_t divisor =
        k::avgDivisor(oh, ow, s.h, s.w, s.kernelH, s.kernelW, s.strideH, s.strideW, s.padH, s.padW, countIncludePad);
    out[o] = k::windowSum(in + plane * s.h * s.w, s.w, wh, ww) / static_cast<float>(divisor);
  }
}

__global__ void avgPoolBackwardKernel(float* gradIn, const float* gradOut, Pool2dShape s, int64_t p, int64_t q,
                                      bool countIncludePad) {
  const int64_t total = s.n * s.c * s.h * s.w;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t plane = i / (s.h * s.w), ih = (i / s.w) % s.h, iw = i % s.w;
    gradIn[i] = k::avgPoolGradAt(gradOut + plane * p * q, ih, iw, s.h, s.w, p, q, s.kernelH, s.kernelW, s.strideH,
                                 s.strideW, s.padH, s.padW, countIncludePad);
  }
}

__global__ void adaptiveForwardKernel(float* out, const float* in, int64_t planes, int64_t h, int64_t w, int64_t outH,
                                      int64_t outW) {
  const int64_t total = planes * outH * outW;
  for (int64_t o = firstIndex(); o < total; o += gridStride()) {
    const int64_t plane = o / (outH * outW), oh = (o / outW) % outH, ow = o % outW;
    const k::Window bh = k::adaptiveBin(oh, h, outH), bw = k::adaptiveBin(ow, w, outW);
    out[o] = k::windowSum(in + plane * h * w, w, bh, bw) / k::adaptiveBinArea(bh, bw);
  }
}

__global__ void adaptiveBackwardKernel(float* gradIn, const float* gradOut, int64_t planes, int64_t h, int64_t w,
                                       int64_t outH, int64_t outW) {
  const int64_t total = planes * h * w;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t plane = i / (h * w), ih = (i / w) % h, iw = i % w;
    gradIn[i] = k::adaptiveAvgPoolGradAt(gradOut + plane * outH * outW, ih, iw, h, w, outH, outW);
  }
}

// ---- upsampling ------------------------------------------------------------------------

__global__ void upsampleForwardKernel(float* out, const float* in, int64_t planes, int64_t h, int64_t w, int64_t outH,
                                      int64_t outW) {
  const int64_t total = planes * outH * outW;
  for (int64_t o = firstIndex(); o < total; o += gridStride()) {
    const int64_t plane = o / (outH * outW), oh = (o / outW) % outH, ow = o % outW;
    out[o] = k::bilinearAt(in + plane * h * w, w, k::bilinearTap(oh, h, outH), k::bilinearTap(ow, w, outW));
  }
}

__global__ void upsampleBackwardKernel(float* gradIn, const float* gradOut, int64_t planes, int64_t h, int64_t w,
                                       int64_t outH, int64_t outW) {
  const int64_t total = planes * h * w;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t plane = i / (h * w), ih = (i / w) % h, iw = i % w;
    gradIn[i] = k::upsampleGradAt(gradOut + plane * outH * outW, ih, iw, h, w, outH, outW);
  }
}

// ---- cross-entropy ---------------------------------------------------------------------

// A fixed grid, so each thread's share of positions, and with it the order of the sums,
// never depends on the device.
constexpr int kLossBlocks = 128;

// Tree sum over a block's kThreads values in shared memory; the result lands in v[0].
template <class T>
__device__ void blockTreeSum(T* v) {
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) v[threadIdx.x] += v[threadIdx.x + width];
    __syncthreads();
  }
}

struct LossPartials {
  double loss[kLossBlocks];
  long long counted[kLossBlocks];
  unsigned long long firstBad;  // lowest position with an invalid target, or ~0
};

__global__ void crossEntropyForwardKernel(float* probs, const float* logits, const int64_t* targets,
                                          CrossEntropyShape s, float labelSmoothing, int64_t ignoreIndex,
                                          LossPartials* partials) {
  __shared__ double loss[kThreads];
  __shared__ long long counted[kThreads];
  const float invC = 1.0f / static_cast<float>(s.c);
  double myLoss = 0.0;
  long long myCount = 0;
  const int64_t positions = s.n * s.spatial;
  for (int64_t pos = firstIndex(); pos < positions; pos += gridStride()) {
    const int64_t n = pos / s.spatial, i = pos % s.spatial;
    const float* x = logits + n * s.c * s.spatial + i;
    float* p = probs + n * s.c * s.spatial + i;
    float maxLogit = bitCast<float>(0xff800000u), sumLogit = 0.0f, sumExp = 0.0f;
    for (int64_t c = 0; c < s.c; ++c) k::logitStats(x[c * s.spatial], maxLogit, sumLogit);
    for (int64_t c = 0; c < s.c; ++c) {
      const float e = k::softmaxNumerator(x[c * s.spatial], maxLogit);
      p[c * s.spatial] = e;
      sumExp += e;
    }
    const float invSum = 1.0f / sumExp;
    for (int64_t c = 0; c < s.c; ++c) p[c * s.spatial] *= invSum;
    const int64_t t = targets[pos];
    if (t == ignoreIndex) continue;
    if (t < 0 || t >= s.c) {
      atomicMin(&partials->firstBad, static_cast<unsigned long long>(pos));
      continue;
    }
    myLoss += k::crossEntropyAt(maxLogit, invSum, x[t * s.spatial], sumLogit, invC, labelSmoothing);
    ++myCount;
  }
  loss[threadIdx.x] = myLoss;
  counted[threadIdx.x] = myCount;
  __syncthreads();
  blockTreeSum(loss);
  blockTreeSum(counted);
  if (threadIdx.x == 0) {
    partials->loss[blockIdx.x] = loss[0];
    partials->counted[blockIdx.x] = counted[0];
  }
}

// One thread adds the blocks' partial sums in block order.
__global__ void crossEntropyTotalKernel(LossPartials* partials) {
  double loss = 0.0;
  long long counted = 0;
  for (int b = 0; b < kLossBlocks; ++b) {
    loss += partials->loss[b];
    counted += partials->counted[b];
  }
  partials->loss[0] = loss;
  partials->counted[0] = counted;
}

__global__ void countTargetsKernel(long long* counted, const int64_t* targets, int64_t positions, int64_t classes,
                                   int64_t ignoreIndex) {
  long long mine = 0;
  for (int64_t pos = firstIndex(); pos < positions; pos += gridStride()) {
    const int64_t t = targets[pos];
    if (t != ignoreIndex && t >= 0 && t < classes) ++mine;
  }
  if (mine != 0) atomicAdd(reinterpret_cast<unsigned long long*>(counted), static_cast<unsigned long long>(mine));
}

__global__ void crossEntropyBackwardKernel(float* gradLogits, const float* probs, const int64_t* targets,
                                           CrossEntropyShape s, float labelSmoothing, int64_t ignoreIndex,
                                           float gradLoss, const long long* counted) {
  const k::CrossEntropyGrad g = k::crossEntropyGrad(*counted, gradLoss, labelSmoothing, s.c);
  const int64_t total = s.n * s.c * s.spatial;
  for (int64_t j = firstIndex(); j < total; j += gridStride()) {
    const int64_t n = j / (s.c * s.spatial), c = (j / s.spatial) % s.c, i = j % s.spatial;
    const int64_t t = targets[n * s.spatial + i];
    // An out-of-range target was rejected by the forward pass; it gets no gradient here.
    const bool valid = t == ignoreIndex || (t >= 0 && t < s.c);
    gradLogits[j] = valid ? k::crossEntropyGradAt(probs[j], t, c, ignoreIndex, g) : 0.0f;
  }
}

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, StreamHandle stream) {
  launchBinary(out, a, b, n, stream, AddOp{});
}
void sub(float* out, const float* a, const float* b, int64_t n, StreamHandle stream) {
  launchBinary(out, a, b, n, stream, SubOp{});
}
void mul(float* out, const float* a, const float* b, int64_t n, StreamHandle stream) {
  launchBinary(out, a, b, n, stream, MulOp{});
}
void scale(float* out, const float* x, float s, int64_t n, StreamHandle stream) {
  launchUnary(out, x, n, stream, ScaleOp{s});
}
void addScalar(float* out, const float* x, float s, int64_t n, StreamHandle stream) {
  launchUnary(out, x, n, stream, AddScalarOp{s});
}
void relu(float* out, const float* x, int64_t n, StreamHandle stream) { launchUnary(out, x, n, stream, ReluOp{}); }
void reluBackward(float* gradIn, const float* grad, const float* y, int64_t n, StreamHandle stream) {
  launchBinary(gradIn, grad, y, n, stream, ReluBackwardOp{});
}

void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps, StreamHandle stream) {
  batchNormTrainKernel<<<static_cast<unsigned>(shape.c), kThreads, 0, stream>>>(
      out, saveMean, saveInvStd, runningMean, runningVar, in, gamma, beta, shape, momentum, eps);
  checkLaunch();
}

void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps, StreamHandle stream) {
  batchNormEvalKernel<<<gridFor(shape.n * shape.c * shape.hw), kThreads, 0, stream>>>(out, in, gamma, beta, runningMean,
                                                                                      runningVar, shape, eps);
  checkLaunch();
}

void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd, const BatchNormShape& shape,
                       StreamHandle stream) {
  batchNormBackwardKernel<<<static_cast<unsigned>(shape.c), kThreads, 0, stream>>>(
      gradIn, gradGamma, gradBeta, gradOut, in, gamma, saveMean, saveInvStd, shape);
  checkLaunch();
}

void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape, StreamHandle stream) {
  const int64_t p = shape.outH(), q = shape.outW();
  maxPoolForwardKernel<<<gridFor(shape.n * shape.c * p * q), kThreads, 0, stream>>>(out, argmax, in, shape, p, q);
  checkLaunch();
}

void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax, const Pool2dShape& shape,
                       StreamHandle stream) {
  const int64_t p = shape.outH(), q = shape.outW();
  maxPoolBackwardKernel<<<gridFor(shape.n * shape.c * shape.h * shape.w), kThreads, 0, stream>>>(gradIn, gradOut,
                                                                                                 argmax, shape, p, q);
  checkLaunch();
}

void avgPool2dForward(float* out, const float* in, const Pool2dShape& shape, bool countIncludePad,
                      StreamHandle stream) {
  const int64_t p = shape.outH(), q = shape.outW();
  avgPoolForwardKernel<<<gridFor(shape.n * shape.c * p * q), kThreads, 0, stream>>>(out, in, shape, p, q,
                                                                                    countIncludePad);
  checkLaunch();
}

void avgPool2dBackward(float* gradIn, const float* gradOut, const Pool2dShape& shape, bool countIncludePad,
                       StreamHandle stream) {
  const int64_t p = shape.outH(), q = shape.outW();
  avgPoolBackwardKernel<<<gridFor(shape.n * shape.c * shape.h * shape.w), kThreads, 0, stream>>>(gradIn, gradOut, shape,
                                                                                                 p, q, countIncludePad);
  checkLaunch();
}

void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                              int64_t outW, StreamHandle stream) {
  adaptiveForwardKernel<<<gridFor(n * c * outH * outW), kThreads, 0, stream>>>(out, in, n * c, h, w, outH, outW);
  checkLaunch();
}

void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                               int64_t outH, int64_t outW, StreamHandle stream) {
  adaptiveBackwardKernel<<<gridFor(n * c * h * w), kThreads, 0, stream>>>(gradIn, gradOut, n * c, h, w, outH, outW);
  checkLaunch();
}

void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                             int64_t outW, StreamHandle stream) {
  upsampleForwardKernel<<<gridFor(n * c * outH * outW), kThreads, 0, stream>>>(out, in, n * c, h, w, outH, outW);
  checkLaunch();
}

void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t outH, int64_t outW, StreamHandle stream) {
  upsampleBackwardKernel<<<gridFor(n * c * h * w), kThreads, 0, stream>>>(gradIn, gradOut, n * c, h, w, outH, outW);
  checkLaunch();
}

float crossEntropyForward(float* probs, const float* logits, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, StreamHandle stream) {
  LossPartials* partials = nullptr;
  APS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), sizeof(LossPartials), stream));
  cudaError_t status = cudaMemsetAsync(&partials->firstBad, 0xff, sizeof(unsigned long long), stream);
  if (status == cudaSuccess) {
    crossEntropyForwardKernel<<<kLossBlocks, kThreads, 0, stream>>>(probs, logits, targets, shape, labelSmoothing,
                                                                    ignoreIndex, partials);
    crossEntropyTotalKernel<<<1, 1, 0, stream>>>(partials);
    status = cudaGetLastError();
  }
  double loss = 0.0;
  long long counted = 0;
  unsigned long long firstBad = ~0ull;
  if (status == cudaSuccess)
    status = cudaMemcpyAsync(&loss, &partials->loss[0], sizeof loss, cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(&counted, &partials->counted[0], sizeof counted, cudaMemcpyDeviceToHost, stream);
  }
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(&firstBad, &partials->firstBad, sizeof firstBad, cudaMemcpyDeviceToHost, stream);
  }
  cudaFreeAsync(partials, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  APS_CUDA_CHECK(status);
  if (firstBad != ~0ull) {
    int64_t target = 0;
    APS_CUDA_CHECK(cudaMemcpy(&target, targets + firstBad, sizeof target, cudaMemcpyDeviceToHost));
    throwBadTarget(target, static_cast<int64_t>(firstBad), shape.c, ignoreIndex);
  }
  if (counted == 0) return 0.0f;
  return static_cast<float>(loss / static_cast<double>(counted));
}

void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, float gradLoss, StreamHandle stream) {
  long long* counted = nullptr;
  APS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&counted), sizeof(long long), stream));
  cudaError_t status = cudaMemsetAsync(counted, 0, sizeof(long long), stream);
  if (status == cudaSuccess) {
    const int64_t positions = shape.n * shape.spatial;
    countTargetsKernel<<<gridFor(positions), kThreads, 0, stream>>>(counted, targets, positions, shape.c, ignoreIndex);
    crossEntropyBackwardKernel<<<gridFor(shape.n * shape.c * shape.spatial), kThreads, 0, stream>>>(
        gradLogits, probs, targets, shape, labelSmoothing, ignoreIndex, gradLoss, counted);
    status = cudaGetLastError();
  }
  cudaFreeAsync(counted, stream);
  APS_CUDA_CHECK(status);
}

namespace {
template <class Half>
__global__ void toSixteenBitKernel(Half* out, const float* in, int64_t n) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    if constexpr (std::is_same_v<Half, __half>) {
      out[i] = __float2half_rn(in[i]);
    } else {
      out[i] = __float2bfloat16_rn(in[i]);
    }
  }
}
template <class Half>
__global__ void fromSixteenBitKernel(float* out, const Half* in, int64_t n) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    if constexpr (std::is_same_v<Half, __half>) {
      out[i] = __half2float(in[i]);
    } else {
      out[i] = __bfloat162float(in[i]);
    }
  }
}
}  // namespace

void toSixteenBit(void* out, const float* in, int64_t n, precision::ComputeFormat format, StreamHandle stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (format == precision::ComputeFormat::Fp16) {
    toSixteenBitKernel<<<gridFor(n), kThreads, 0, s>>>(static_cast<__half*>(out), in, n);
  } else {
    toSixteenBitKernel<<<gridFor(n), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(out), in, n);
  }
  checkLaunch();
}

void fromSixteenBit(float* out, const void* in, int64_t n, precision::ComputeFormat format, StreamHandle stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (format == precision::ComputeFormat::Fp16) {
    fromSixteenBitKernel<<<gridFor(n), kThreads, 0, s>>>(out, static_cast<const __half*>(in), n);
  } else {
    fromSixteenBitKernel<<<gridFor(n), kThreads, 0, s>>>(out, static_cast<const __nv_bfloat16*>(in), n);
  }
  checkLaunch();
}

}  // namespace aps::cuda
