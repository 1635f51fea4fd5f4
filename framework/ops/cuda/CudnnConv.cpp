#include "framework/ops/cuda/CudnnConv.h"

#include "framework/core/Error.h"
#include "framework/ops/cuda/Kernels.h"
#include "framework/tensor/cuda/CudaAllocator.h"

// The convolution entry points used here (descriptors, the _v7 heuristics, the forward and
// backward calls) are cuDNN's long-standing legacy API, marked deprecated in cuDNN 9 in
// favour of the graph API but fully supported; they are what a fixed-shape NCHW convolution
// needs and keep this file short. Moving to the graph API changes only this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <map>
#include <mutex>

namespace aps::cuda {

namespace {

void check(cudnnStatus_t status, const char* what) {
  APS_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN: {} failed: {}", what, cudnnGetErrorString(status));
}
#define APS_CUDNN(expr) check((expr), #expr)

// One cuDNN handle per device, made on first use (a handle costs ~100 ms to create).
cudnnHandle_t handleFor(int device, StreamHandle stream) {
  static std::mutex mutex;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  cudnnHandle_t& handle = handles[device];
  if (handle == nullptr) APS_CUDNN(cudnnCreate(&handle));
  APS_CUDNN(cudnnSetStream(handle, static_cast<cudaStream_t>(stream)));
  return handle;
}

int narrow(int64_t v) { return static_cast<int>(v); }

// The descriptors of one convolution, made and destroyed per call (microseconds).
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(const cpu::Conv2dShape& s, bool allowTf32, cudnnDataType_t type) {
    APS_CUDNN(cudnnCreateTensorDescriptor(&x));
    APS_CUDNN(cudnnCreateTensorDescriptor(&y));
    APS_CUDNN(cudnnCreateTensorDescriptor(&bias));
    APS_CUDNN(cudnnCreateFilterDescriptor(&w));
    APS_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
    APS_CUDNN(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, narrow(s.n), narrow(s.c), narrow(s.h), narrow(s.w)));
    APS_CUDNN(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, narrow(s.n), narrow(s.k), narrow(s.outH()),
                                         narrow(s.outW())));
    APS_CUDNN(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, narrow(s.k), 1, 1));
    APS_CUDNN(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, narrow(s.k), narrow(s.c / s.groups), narrow(s.r),
                                         narrow(s.s)));
    APS_CUDNN(cudnnSetConvolution2dDescriptor(conv, narrow(s.padH), narrow(s.padW), narrow(s.strideH),
                                              narrow(s.strideW), narrow(s.dilationH), narrow(s.dilationW),
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    APS_CUDNN(cudnnSetConvolutionGroupCount(conv, narrow(s.groups)));
    // FMA math forbids TF32: float32 convolutions then round like the CPU's (to summation order).
    // 16-bit tensors (float compute, set above) run on tensor cores.
    const cudnnMathType_t math =
        type != CUDNN_DATA_FLOAT ? CUDNN_TENSOR_OP_MATH : (allowTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    APS_CUDNN(cudnnSetConvolutionMathType(conv, math));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// The algorithms chosen for one shape and option set, with their workspace sizes.
struct Plan {
  cudnnConvolutionFwdAlgoPerf_t forward{};  // algo, mathType and memory (workspace bytes) are used
  cudnnConvolutionBwdDataAlgoPerf_t backwardData{};
  cudnnConvolutionBwdFilterAlgoPerf_t backwardFilter{};
};

using PlanKey = std::array<int64_t, 18>;
constexpr size_t kWorkspaceLimit = size_t{1} << 30;

std::mutex planMutex;
std::map<PlanKey, Plan> plans;

// The first algorithm cuDNN's heuristics rank that runs, fits the workspace limit and, when
// asked, is deterministic (the heuristics order by expected speed).
template <typename Perf>
const Perf& pick(const Perf* perf, int count, bool deterministic, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kWorkspaceLimit) continue;
    if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    return perf[i];
  }
  APS_FAIL("cuDNN offers no {} {}algorithm for this convolution within {} bytes of workspace", what,
           deterministic ? "deterministic " : "", kWorkspaceLimit);
}

const Plan& planFor(cudnnHandle_t handle, const Descriptors& d, const cpu::Conv2dShape& s, const ConvOptions& o,
                    int device) {
  const PlanKey key{s.n,         s.c,       s.h,
                    s.w,         s.k,       s.r,
                    s.s,         s.strideH, s.strideW,
                    s.padH,      s.padW,    s.dilationH,
                    s.dilationW, s.groups,  o.deterministic,
                    o.allowTf32, device,    static_cast<int64_t>(o.format)};
  std::lock_guard<std::mutex> lock(planMutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  constexpr int kMax = 16;
  int count = 0;
  Plan plan;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  APS_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, kMax, &count, fwd));
  plan.forward = pick(fwd, count, o.deterministic, "forward");
  cudnnConvolutionBwdDataAlgoPerf_t data[kMax];
  APS_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, kMax, &count, data));
  plan.backwardData = pick(data, count, o.deterministic, "backward-data");
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMax];
  APS_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, kMax, &count, filter));
  plan.backwardFilter = pick(filter, count, o.deterministic, "backward-filter");
  if (!o.allowTf32 && o.format == precision::ComputeFormat::Fp32) {  // the heuristics may report tensor-op math
    plan.forward.mathType = plan.backwardData.mathType = plan.backwardFilter.mathType = CUDNN_FMA_MATH;
  }
  return plans.emplace(key, plan).first->second;
}

cudnnDataType_t dataTypeOf(precision::ComputeFormat format) {
  switch (format) {
    case precision::ComputeFormat::Fp16:
      return CUDNN_DATA_HALF;
    case precision::ComputeFormat::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    case precision::ComputeFormat::Fp32:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

struct ConvSizes {
  int64_t in, weight, out;
};
ConvSizes convSizes(const cpu::Conv2dShape& s) {
  return {s.n * s.c * s.h * s.w, s.k * (s.c / s.groups) * s.r * s.s, s.n * s.k * s.outH() * s.outW()};
}

// A 2-byte copy of n float32 values (16-bit compute), or nothing in float32.
class SixteenBitCopy {
 public:
  SixteenBitCopy(const float* values, int64_t n, precision::ComputeFormat format, int device, StreamHandle stream)
      : scratch_(format == precision::ComputeFormat::Fp32 || values == nullptr ? 0 : static_cast<size_t>(n) * 2,
                 device),
        data_(scratch_.bytes() > 0 ? scratch_.data() : const_cast<float*>(values)) {
    if (scratch_.bytes() > 0) toSixteenBit(scratch_.data(), values, n, format, stream);
  }
  void* data() const { return data_; }

 private:
  DeviceScratch scratch_;
  void* data_;
};

// Where a result goes: the float32 output itself, or a 2-byte buffer widened into it by finish().
class SixteenBitResult {
 public:
  SixteenBitResult(float* out, int64_t n, precision::ComputeFormat format, int device)
      : out_(out),
        n_(n),
        format_(format),
        scratch_(format == precision::ComputeFormat::Fp32 || out == nullptr ? 0 : static_cast<size_t>(n) * 2, device) {}
  void* data() const { return scratch_.bytes() > 0 ? scratch_.data() : out_; }
  void finish(StreamHandle stream) const {
    if (scratch_.bytes() > 0) fromSixteenBit(out_, scratch_.data(), n_, format_, stream);
  }

 private:
  float* out_;
  int64_t n_;
  precision::ComputeFormat format_;
  DeviceScratch scratch_;
};

}  // namespace

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const cpu::Conv2dShape& shape,
                   const ConvOptions& options, StreamHandle stream) {
  APS_CHECK(bias == nullptr || options.format == precision::ComputeFormat::Fp32,
            "conv2d on cuda: a biased convolution runs in float32 (its bias is added before the one rounding)");
  const int device = currentDevice();
  cudnnHandle_t handle = handleFor(device, stream);
  Descriptors d(shape, options.allowTf32, dataTypeOf(options.format));
  const Plan& plan = planFor(handle, d, shape, options, device);
  APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.forward.mathType));
  const ConvSizes z = convSizes(shape);
  const SixteenBitCopy x(in, z.in, options.format, device, stream), w(weight, z.weight, options.format, device, stream);
  const SixteenBitResult y(out, z.out, options.format, device);
  DeviceScratch ws(plan.forward.memory, device);
  const float one = 1.0f, zero = 0.0f;
  APS_CUDNN(cudnnConvolutionForward(handle, &one, d.x, x.data(), d.w, w.data(), d.conv, plan.forward.algo, ws.data(),
                                    ws.bytes(), &zero, d.y, y.data()));
  y.finish(stream);
  if (bias != nullptr) APS_CUDNN(cudnnAddTensor(handle, &one, d.bias, bias, &one, d.y, out));
}

void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const cpu::Conv2dShape& shape, const ConvOptions& options,
                    StreamHandle stream) {
  const int device = currentDevice();
  cudnnHandle_t handle = handleFor(device, stream);
  Descriptors d(shape, options.allowTf32, dataTypeOf(options.format));
  const Plan& plan = planFor(handle, d, shape, options, device);
  const ConvSizes z = convSizes(shape);
  const precision::ComputeFormat f = options.format;
  const SixteenBitCopy dy(gradOut, z.out, f, device, stream);
  const float one = 1.0f, zero = 0.0f;
  if (gradIn != nullptr) {
    APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.backwardData.mathType));
    const SixteenBitCopy w(weight, z.weight, f, device, stream);
    const SixteenBitResult dx(gradIn, z.in, f, device);
    DeviceScratch ws(plan.backwardData.memory, device);
    APS_CUDNN(cudnnConvolutionBackwardData(handle, &one, d.w, w.data(), d.y, dy.data(), d.conv, plan.backwardData.algo,
                                           ws.data(), ws.bytes(), &zero, d.x, dx.data()));
    dx.finish(stream);
  }
  if (gradWeight != nullptr) {
    APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.backwardFilter.mathType));
    const SixteenBitCopy x(in, z.in, f, device, stream);
    const SixteenBitResult dw(gradWeight, z.weight, f, device);
    DeviceScratch ws(plan.backwardFilter.memory, device);
    APS_CUDNN(cudnnConvolutionBackwardFilter(handle, &one, d.x, x.data(), d.y, dy.data(), d.conv,
                                             plan.backwardFilter.algo, ws.data(), ws.bytes(), &zero, d.w, dw.data()));
    dw.finish(stream);
  }
  if (gradBias != nullptr) {  // from the float32 gradient, with float32 descriptors
    if (f == precision::ComputeFormat::Fp32) {
      APS_CUDNN(cudnnConvolutionBackwardBias(handle, &one, d.y, gradOut, &zero, d.bias, gradBias));
    } else {
      const Descriptors fd(shape, options.allowTf32, CUDNN_DATA_FLOAT);
      APS_CUDNN(cudnnConvolutionBackwardBias(handle, &one, fd.y, gradOut, &zero, fd.bias, gradBias));
    }
  }
}

size_t convolutionPlansCached() {
  std::lock_guard<std::mutex> lock(planMutex);
  return plans.size();
}

}  // namespace aps::cuda

#pragma GCC diagnostic pop
