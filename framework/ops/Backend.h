#pragma once

// Where an op's kernels come from: one table per kind of device, with the CPU kernels'
// signatures (framework/ops/cpu/Kernels.h) on that device's pointers, as ggml's backends or
// PyTorch's dispatch keys. A front end (framework/ops/*.cpp) checks its inputs, asks
// backendFor for the table of their device (one place per op), allocates its outputs there
// and calls the table; it never tests the device itself. The CPU table calls the CPU kernels;
// the CUDA table (cuda/CudaBackend.cpp, in builds with a CUDA backend, real or emulated) the
// CUDA kernels, cuDNN and cuBLAS on the device's compute stream (the legacy default stream,
// which orders every kernel and copy of a step).

#include "framework/ops/cpu/Kernels.h"
#include "framework/tensor/Tensor.h"

#include <initializer_list>

namespace aps::ops {

enum class BinaryOp { Add, Sub, Mul, ReluBackward };  // ReluBackward(g, y): g where y > 0
enum class UnaryOp { Scale, AddScalar, Relu };        // x * s, x + s, max(x, 0)

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Over n contiguous floats; out may alias an input.
  virtual void binary(BinaryOp op, float* out, const float* a, const float* b, int64_t n) const = 0;
  virtual void unary(UnaryOp op, float* out, const float* x, float s, int64_t n) const = 0;

  virtual void conv2dForward(float* out, const float* in, const float* weight, const float* bias,
                             const cpu::Conv2dShape& shape) const = 0;
  virtual void conv2dBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                              const float* weight, const cpu::Conv2dShape& shape) const = 0;

  // The front end fuses ReLU and the residual into batch norm (a non-empty epilogue) only
  // where fusedBatchNorm() (the CPU); elsewhere it runs the separate ops, the same bits.
  virtual bool fusedBatchNorm() const = 0;
  virtual void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean,
                                     float* runningVar, const float* in, const float* gamma, const float* beta,
                                     const cpu::BatchNormShape& shape, float momentum, float eps,
                                     const cpu::BatchNormEpilogue& epilogue) const = 0;
  virtual void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta,
                                    const float* runningMean, const float* runningVar, const cpu::BatchNormShape& shape,
                                    float eps) const = 0;
  virtual void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut,
                                 const float* in, const float* gamma, const float* saveMean, const float* saveInvStd,
                                 const cpu::BatchNormShape& shape, const cpu::BatchNormGradEpilogue& epilogue) const = 0;

  virtual void maxPool2dForward(float* out, int64_t* argmax, const float* in, const cpu::Pool2dShape& shape) const = 0;
  virtual void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax,
                                 const cpu::Pool2dShape& shape) const = 0;
  virtual void avgPool2dForward(float* out, const float* in, const cpu::Pool2dShape& shape,
                                bool countIncludePad) const = 0;
  virtual void avgPool2dBackward(float* gradIn, const float* gradOut, const cpu::Pool2dShape& shape,
                                 bool countIncludePad) const = 0;
  virtual void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w,
                                        int64_t outH, int64_t outW) const = 0;
  virtual void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h,
                                         int64_t w, int64_t outH, int64_t outW) const = 0;
  virtual void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w,
                                       int64_t outH, int64_t outW) const = 0;
  virtual void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h,
                                        int64_t w, int64_t outH, int64_t outW) const = 0;

  // Returns the mean loss to the host.
  virtual float crossEntropyForward(float* probs, const float* logits, const int64_t* targets,
                                    const cpu::CrossEntropyShape& shape, float labelSmoothing,
                                    int64_t ignoreIndex) const = 0;
  virtual void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets,
                                    const cpu::CrossEntropyShape& shape, float labelSmoothing, int64_t ignoreIndex,
                                    float gradLoss) const = 0;

  virtual void linearForward(float* out, const float* in, const float* weight, const float* bias, int64_t rows,
                             int64_t inFeatures, int64_t outFeatures) const = 0;
  virtual void linearBackward(float* gradIn, float* gradWeight, float* gradBias, const float* gradOut, const float* in,
                              const float* weight, int64_t rows, int64_t inFeatures, int64_t outFeatures) const = 0;
  virtual void matmul(float* out, const float* a, const float* b, int64_t m, int64_t k, int64_t n) const = 0;
};

// The table of the device all defined `tensors` are on. Tensors on two devices are an error
// naming the op and both devices; a device without a backend in this build is an error too.
const Backend& backendFor(const char* op, std::initializer_list<const Tensor*> tensors);

// How the CUDA table computes where a GPU offers a choice (the emulated device computes the
// CPU's bits either way): TF32 tensor cores for float32 convolutions and products (PyTorch's
// default for convolutions), and only algorithms cuDNN marks deterministic.
struct CudaMath {
  bool allowTf32 = true;
  bool deterministic = false;
};
void setCudaMath(const CudaMath& math);
CudaMath cudaMath();

// The CUDA table, or nullptr where none is linked. The table and the CUDA libraries behind it
// (cuDNN, cuBLAS: hundreds of MB to load) come with the object library aps_cuda_backend
// (cuda/CudaBackend.cpp), which registers it at start-up; programs that run on GPUs link it
// (aps_train, aps_bench_train, the device tests), so a CPU-only program does not load them.
const Backend* cudaBackend();
void registerCudaBackend(const Backend* backend);

}  // namespace aps::ops
