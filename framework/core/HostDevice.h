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

// The NaN an fp32 operation returns, as x86 (SSE/AVX) returns it. IEEE 754 leaves a NaN
// result's sign and payload open: x86 returns the first operand's NaN, else the second's, made
// quiet, and its default NaN (0xffc00000) for an invalid operation such as inf - inf; an NVIDIA
// GPU returns its canonical NaN (0x7fffffff) for all of these. Device kernels whose results
// the CPU's bits are held to (the codecs' sums and scalings, which carry a NaN gradient onto
// the wire) compute through these, so the GPU gives the CPU's bits; on the host they give what
// the plain operation gives. Where both operands are NaN, which one the CPU keeps depends on
// the operand order the compiler chose, so only that case is the CPU compiler's to decide
// (the float codecs' decode-add takes it out of its hands: addDecoded).
APS_HOST_DEVICE inline float nanAsX86(float result, float a, float b) {
  if (result == result) return result;
  if (a != a) return bitCast<float>(bitCast<uint32_t>(a) | 0x00400000u);
  if (b != b) return bitCast<float>(bitCast<uint32_t>(b) | 0x00400000u);
  return bitCast<float>(0xffc00000u);
}
APS_HOST_DEVICE inline float addAsX86(float a, float b) { return nanAsX86(a + b, a, b); }
APS_HOST_DEVICE inline float mulAsX86(float a, float b) { return nanAsX86(a * b, a, b); }
// A decoded value added to a sum (the float codecs' decode-add): a NaN value is kept, made
// quiet, whatever the sum holds, else addAsX86. So a NaN value onto a NaN sum gives one answer
// on every path (x86 would keep whichever operand the compiler put first), and the same on a GPU.
APS_HOST_DEVICE inline float addDecoded(float sum, float v) {
  if (v != v) return bitCast<float>(bitCast<uint32_t>(v) | 0x00400000u);
  return addAsX86(sum, v);
}

}  // namespace aps
