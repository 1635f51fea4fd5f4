#include "framework/ops/cuda/CudnnConv.h"

#include "framework/core/Error.h"
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

  Descriptors(const cpu::Conv2dShape& s, bool allowTf32) {
    APS_CUDNN(cudnnCreateTensorDescriptor(&x));
    APS_CUDNN(cudnnCreateTensorDescriptor(&y));
    APS_CUDNN(cudnnCreateTensorDescriptor(&bias));
    APS_CUDNN(cudnnCreateFilterDescriptor(&w));
    APS_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
    APS_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, narrow(s.n), narrow(s.c), narrow(s.h),
                                         narrow(s.w)));
    APS_CUDNN(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, narrow(s.n), narrow(s.k),
                                         narrow(s.outH()), narrow(s.outW())));
    APS_CUDNN(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, narrow(s.k), 1, 1));
    APS_CUDNN(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, narrow(s.k), narrow(s.c / s.groups),
                                         narrow(s.r), narrow(s.s)));
    APS_CUDNN(cudnnSetConvolution2dDescriptor(conv, narrow(s.padH), narrow(s.padW), narrow(s.strideH),
                                              narrow(s.strideW), narrow(s.dilationH), narrow(s.dilationW),
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    APS_CUDNN(cudnnSetConvolutionGroupCount(conv, narrow(s.groups)));
    // FMA math forbids TF32: float32 convolutions then round like the CPU's (to summation order).
    APS_CUDNN(cudnnSetConvolutionMathType(conv, allowTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
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

using PlanKey = std::array<int64_t, 17>;
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
  const PlanKey key{s.n,         s.c,         s.h,         s.w,       s.k,
                    s.r,         s.s,         s.strideH,   s.strideW, s.padH,
                    s.padW,      s.dilationH, s.dilationW, s.groups,  o.deterministic,
                    o.allowTf32, device};
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
  if (!o.allowTf32) {  // the heuristics may report tensor-op math; FMA was asked for
    plan.forward.mathType = plan.backwardData.mathType = plan.backwardFilter.mathType = CUDNN_FMA_MATH;
  }
  return plans.emplace(key, plan).first->second;
}

// Device scratch from the caching allocator, for the length of one call (reuse is safe in
// stream order, CudaAllocator.h).
class Workspace {
 public:
  Workspace(size_t bytes, int device) : bytes_(bytes), device_(device) {
    if (bytes_ > 0) data_ = CudaAllocator::instance().allocate(bytes_, device_);
  }
  ~Workspace() { CudaAllocator::instance().release(data_, bytes_, device_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace

void conv2dForward(float* out, const float* in, const float* weight, const float* bias, const cpu::Conv2dShape& shape,
                   const ConvOptions& options, StreamHandle stream) {
  const int device = currentDevice();
  cudnnHandle_t handle = handleFor(device, stream);
  Descriptors d(shape, options.allowTf32);
  const Plan& plan = planFor(handle, d, shape, options, device);
  APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.forward.mathType));
  Workspace ws(plan.forward.memory, device);
  const float one = 1.0f, zero = 0.0f;
  APS_CUDNN(cudnnConvolutionForward(handle, &one, d.x, in, d.w, weight, d.conv, plan.forward.algo, ws.data(),
                                    ws.bytes(), &zero, d.y, out));
  if (bias != nullptr) APS_CUDNN(cudnnAddTensor(handle, &one, d.bias, bias, &one, d.y, out));
}

void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                    const float* weight, const cpu::Conv2dShape& shape, const ConvOptions& options,
                    StreamHandle stream) {
  const int device = currentDevice();
  cudnnHandle_t handle = handleFor(device, stream);
  Descriptors d(shape, options.allowTf32);
  const Plan& plan = planFor(handle, d, shape, options, device);
  const float one = 1.0f, zero = 0.0f;
  if (gradIn != nullptr) {
    APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.backwardData.mathType));
    Workspace ws(plan.backwardData.memory, device);
    APS_CUDNN(cudnnConvolutionBackwardData(handle, &one, d.w, weight, d.y, gradOut, d.conv, plan.backwardData.algo,
                                           ws.data(), ws.bytes(), &zero, d.x, gradIn));
  }
  if (gradWeight != nullptr) {
    APS_CUDNN(cudnnSetConvolutionMathType(d.conv, plan.backwardFilter.mathType));
    Workspace ws(plan.backwardFilter.memory, device);
    APS_CUDNN(cudnnConvolutionBackwardFilter(handle, &one, d.x, in, d.y, gradOut, d.conv, plan.backwardFilter.algo,
                                             ws.data(), ws.bytes(), &zero, d.w, gradWeight));
  }
  if (gradBias != nullptr) APS_CUDNN(cudnnConvolutionBackwardBias(handle, &one, d.y, gradOut, &zero, d.bias, gradBias));
}

size_t convolutionPlansCached() {
  std::lock_guard<std::mutex> lock(planMutex);
  return plans.size();
}

}  // namespace aps::cuda

#pragma GCC diagnostic pop
