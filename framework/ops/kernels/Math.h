#pragma once

// The few libm calls the shared op arithmetic needs, one name for host and device. The host
// side keeps the std:: calls the CPU kernels always made, so their bits do not change; the
// device side uses CUDA's functions, whose results may differ from glibc's in the last bits
// (expf, log). Ops that use these are compared with a tolerance, not bit for bit.

#include "framework/core/HostDevice.h"

#include <cmath>

namespace aps::kernels {

APS_HOST_DEVICE inline float expf32(float x) {
#if APS_DEVICE_CODE
  return ::expf(x);
#else
  return std::exp(x);
#endif
}

APS_HOST_DEVICE inline double logf64(double x) {
#if APS_DEVICE_CODE
  return ::log(x);
#else
  return std::log(x);
#endif
}

// Correctly rounded on both sides (IEEE square root; nvcc's default -prec-sqrt=true).
APS_HOST_DEVICE inline float sqrtf32(float x) {
#if APS_DEVICE_CODE
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

APS_HOST_DEVICE inline double sqrtf64(double x) {
#if APS_DEVICE_CODE
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// a * b + c with one rounding. No compiler fuses on its own (the CPU code is built with
// -ffp-contract=off, the CUDA code with --fmad=false: docs/ARCHITECTURE.md, "One arithmetic
// for CPU and GPU"), so a fused step is one written out with these, and CPU and GPU fuse the
// same steps.
APS_HOST_DEVICE inline float fmaf32(float a, float b, float c) {
#if APS_DEVICE_CODE
  return ::fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
APS_HOST_DEVICE inline double fmaf64(double a, double b, double c) {
#if APS_DEVICE_CODE
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

APS_HOST_DEVICE inline bool isNaN(float x) {
#if APS_DEVICE_CODE
  return ::isnan(x);
#else
  return std::isnan(x);
#endif
}

// A range [begin, end) of indices along one axis: a pooling window, or the outputs whose
// windows hold one input.
struct Window {
  int64_t begin, end;
};

APS_HOST_DEVICE inline float maxf32(float a, float b) { return a < b ? b : a; }
APS_HOST_DEVICE inline int64_t minI64(int64_t a, int64_t b) { return a < b ? a : b; }
APS_HOST_DEVICE inline int64_t maxI64(int64_t a, int64_t b) { return a < b ? b : a; }

}  // namespace aps::kernels
