#pragma once

// The one marker for arithmetic shared by the CPU and CUDA kernels (docs/ARCHITECTURE.md,
// "One arithmetic for CPU and GPU"): a per-element or per-block computation is written once,
// as an inline function marked APS_HOST_DEVICE in a header that the CPU kernels include and
// the CUDA kernels (.cu files) include too. The CPU build compiles it as plain inline C++, so
// the CPU tests prove the arithmetic the GPU runs; a CUDA kernel is a thin launch around it.
//
// Rules for such functions: no exceptions, no allocation, no std:: containers, no libm calls
// that differ between host and device (use the helpers below or integer arithmetic), no
// static data other than constexpr scalars and arrays.

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define APS_HOST_DEVICE __host__ __device__
#else
#define APS_HOST_DEVICE
#endif

// Inside a shared function: true when compiled for the GPU (nvcc's device pass).
#if defined(__CUDA_ARCH__)
#define APS_DEVICE_CODE 1
#else
#define APS_DEVICE_CODE 0
#endif

namespace aps {

// std::bit_cast for host and device (nvcc's device pass has no constexpr std::bit_cast
// without --expt-relaxed-constexpr; a 4-byte memcpy compiles to a register move there).
template <class To, class From>
APS_HOST_DEVICE inline To bitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bitCast needs types of the same size");
#if APS_DEVICE_CODE
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
#else
  return std::bit_cast<To>(from);
#endif
}

}  // namespace aps
