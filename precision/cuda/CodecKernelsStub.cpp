// The CUDA codec launches of a build without CUDA: each throws, naming what is missing.
#include "framework/core/Error.h"
#include "precision/cuda/CodecKernels.h"

namespace aps::precision::cuda {

namespace {
[[noreturn]] void noCuda(const char* what) {
  APS_FAIL("{}: this build of aps has no CUDA (configure with the CUDA toolkit for the device codecs)", what);
}
}  // namespace

void encode(const DeviceCodecParams&, const float*, int64_t, uint8_t*, const EncodeContext&, void*) {
  noCuda("device codec encode");
}
void decode(const DeviceCodecParams&, const uint8_t*, int64_t, float*, void*) { noCuda("device codec decode"); }
void decodeAdd(const DeviceCodecParams&, const uint8_t*, int64_t, float*, void*) { noCuda("device codec decodeAdd"); }
void decodeAddEncode(const DeviceCodecParams&, const uint8_t*, const uint8_t*, int64_t, uint8_t*, const EncodeContext&,
                     void*) {
  noCuda("device codec decodeAddEncode");
}
void absMaxBits(const float*, int64_t, uint32_t*, void*) { noCuda("device abs-max reduction"); }
void unscaleGradient(float*, int64_t, float, ComputeFormat, uint32_t*, void*) { noCuda("device loss unscaling"); }
void scaleByPowerOfTwo(float*, int64_t, int, void*) { noCuda("device power-of-two scaling"); }
void divideBy(float*, int64_t, float, void*) { noCuda("device division"); }
void addInto(float*, const float*, int64_t, void*) { noCuda("device error-feedback compensation"); }
void multiplyBy(float*, int64_t, float, void*) { noCuda("device FP8-LM scaling"); }
void countNotBelow(const float*, int64_t, float, unsigned long long*, void*) { noCuda("device saturation count"); }
void feedbackResidual(const kernels::RoundingParams&, RoundingMode, const float*, int64_t, const EncodeContext&, int,
                      float, float*, void*) {
  noCuda("device error-feedback residual");
}
void quantizationCounts(const kernels::RoundingParams&, RoundingMode, const float*, const float*, int64_t, int,
                        const EncodeContext&, float, kernels::CountsPartial*, void*) {
  noCuda("device quantization statistics");
}
void compareSums(const float*, const float*, int64_t, kernels::CompareSums*, void*) {
  noCuda("device fidelity comparison");
}

}  // namespace aps::precision::cuda
