// Thin launches around the shared codec arithmetic (precision/kernels/*.h): grid-stride loops
// over values (or bytes of two 4-bit values) and one max reduction per block. No fmt here
// (nvcc cannot compile it): errors go through APS_CUDA_CHECK.
#include "precision/cuda/CodecElements.h"
#include "precision/cuda/CodecKernels.h"

#include "framework/core/Philox.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/tensor/cuda/CudaCheck.h"
#include "framework/tensor/cuda/Launch.cuh"
#include "precision/kernels/Dettmers.h"
#include "precision/kernels/Quantization.h"
#include "precision/kernels/Scaling.h"

#include <cuda_runtime.h>

namespace aps::precision::cuda {

namespace {

using Params = DeviceCodecParams;
using aps::cuda::launch::kThreads;
constexpr int kReduceThreads = 128;
constexpr int64_t kReduceTile = 2048;  // values per CUDA block of the max reduction

cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned gridFor(int64_t units) { return aps::cuda::launch::gridFor(units, 8192); }

int64_t blockLength(const Params& p, int64_t n) { return p.blockSize > 0 ? p.blockSize : n; }
int64_t blockCount(const Params& p, int64_t n) { return (n + blockLength(p, n) - 1) / blockLength(p, n); }

using aps::cuda::launch::firstIndex;
using aps::cuda::launch::gridStride;

using elements::Plain;
using elements::Rounding;
using elements::roundingOf;
using elements::Scaled;
using elements::Sum;

template <class Source>
__global__ void encodeElementsKernel(Rounding r, Source src, int64_t n, uint8_t* out) {
  const int64_t units = r.width == 0 ? (n + 1) / 2 : n;
  for (int64_t u = firstIndex(); u < units; u += gridStride()) elements::encodeUnit(r, src, n, u, out);
}

__global__ void decodeElementsKernel(kernels::CodeDecodeParams d, int32_t width, const uint8_t* in, int64_t n,
                                     const uint8_t* scales, int64_t len, float* out, bool add) {
  for (int64_t i = firstIndex(); i < n; i += gridStride())
    elements::decodeElement(d, width, in, i, scales, len, out, add);
}

__global__ void unscaleKernel(float* data, int64_t n, float inverse, ComputeFormat format, uint32_t* nonFinite) {
  bool bad = false;
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    const float g = data[i] * inverse;
    bad |= !isfinite(g);
    data[i] = format == ComputeFormat::Fp16       ? kernels::roundFp16(g)
              : format == ComputeFormat::BFloat16 ? kernels::roundBf16(g)
                                                  : g;
  }
  if (bad) atomicOr(nonFinite, 1u);
}

__global__ void scaleKernel(float* data, int64_t n, int32_t shift) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) data[i] = kernels::scaleByPow2(data[i], shift);
}

__global__ void divideKernel(float* data, int64_t n, float divisor) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) data[i] = __fdiv_rn(data[i], divisor);
}

__global__ void addIntoKernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) acc[i] = addAsX86(acc[i], x[i]);
}

__global__ void multiplyKernel(float* data, int64_t n, float factor) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) data[i] = nanAsX86(data[i] * factor, data[i], factor);
}

__global__ void countNotBelowKernel(const float* data, int64_t n, float limit, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = firstIndex(); i < n; i += gridStride()) c += !(bitCast<float>(kernels::absBits(data[i])) < limit);
  if (c != 0) atomicAdd(count, c);
}

__global__ void feedbackResidualKernel(kernels::RoundingParams rounding, RoundingMode mode, const float* intended,
                                       int64_t n, EncodeContext ctx, int32_t shift, float scale, float* residual) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    const float q = kernels::quantizedValue(intended[i], i, mode, rounding, ctx.seed, ctx.stream, ctx.offset);
    residual[i] = kernels::feedbackResidual(intended[i], q, shift, scale);
  }
}

// One thread per chunk: its values in order, as the CPU sums them.
__global__ void quantizationCountsKernel(kernels::CountSpec spec, const float* x, const float* quantized, int64_t n,
                                         int64_t chunks, kernels::CountsPartial* out) {
  for (int64_t c = firstIndex(); c < chunks; c += gridStride()) out[c] = kernels::countChunk(spec, x, quantized, n, c);
}

__global__ void compareSumsKernel(const float* lp, const float* exact, int64_t n, int64_t chunks,
                                  kernels::CompareSums* out) {
  for (int64_t c = firstIndex(); c < chunks; c += gridStride()) out[c] = kernels::compareChunk(lp, exact, n, c);
}

// out[b] = max over block b (blocks of len values) of kernels::absBits; out zeroed before.
// Each CUDA block reduces one tile of one block: a warp max, then one atomicMax per warp.
__global__ void blockMaxKernel(const float* in, int64_t n, int64_t len, int64_t tilesPerBlock, int64_t totalTiles,
                               uint32_t* out) {
  for (int64_t t = blockIdx.x; t < totalTiles; t += gridDim.x) {
    const int64_t b = t / tilesPerBlock;
    const int64_t s = t % tilesPerBlock;
    const int64_t blockBegin = b * len;
    const int64_t begin = blockBegin + s * kReduceTile;
    int64_t end = blockBegin + (s + 1) * kReduceTile;
    end = end < blockBegin + len ? end : blockBegin + len;
    end = end < n ? end : n;
    uint32_t m = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const uint32_t a = kernels::absBits(in[i]);
      m = a > m ? a : m;
    }
    for (int lane = 16; lane > 0; lane >>= 1) {
      const uint32_t other = __shfl_xor_sync(0xffffffffu, m, lane);
      m = other > m ? other : m;
    }
    if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(out + b, m);
  }
}

__global__ void writeScalesKernel(const uint32_t* maxBits, int64_t blocks, int32_t emax, uint8_t* out) {
  for (int64_t b = firstIndex(); b < blocks; b += gridStride()) {
    out[b] = static_cast<uint8_t>(kernels::blockScaleCode(maxBits[b], emax));
  }
}

__global__ void dettmersEncodeKernel(Params p, const float* in, int64_t n, int64_t len, const uint32_t* maxBits,
                                     uint8_t* out) {
  __shared__ float midpoints[256];
  for (int k = threadIdx.x; k < 256; k += blockDim.x) midpoints[k] = p.midpoints[k];
  __syncthreads();
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    elements::dettmersEncodeElement(midpoints, p.dettmersTop, in, i, len, maxBits, out);
  }
}

__global__ void dettmersDecodeKernel(Params p, const uint8_t* in, int64_t n, int64_t len, float* out, bool add) {
  __shared__ float book[256];
  for (int k = threadIdx.x; k < 256; k += blockDim.x) book[k] = p.codeBook[k];
  __syncthreads();
  for (int64_t i = firstIndex(); i < n; i += gridStride()) elements::dettmersDecodeElement(book, in, i, len, out, add);
}

// Per-block maxima of in (blocks of len values) into a fresh device buffer of `blocks` words.
uint32_t* blockMaxima(const float* in, int64_t n, int64_t len, cudaStream_t s) {
  const int64_t blocks = (n + len - 1) / len;
  uint32_t* maxBits = nullptr;
  APS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&maxBits), static_cast<size_t>(blocks) * 4, s));
  APS_CUDA_CHECK(cudaMemsetAsync(maxBits, 0, static_cast<size_t>(blocks) * 4, s));
  const int64_t tilesPerBlock = (len + kReduceTile - 1) / kReduceTile;
  const int64_t totalTiles = blocks * tilesPerBlock;
  const unsigned grid = static_cast<unsigned>(totalTiles < 65535 * 8 ? totalTiles : 65535 * 8);
  blockMaxKernel<<<grid, kReduceThreads, 0, s>>>(in, n, len, tilesPerBlock, totalTiles, maxBits);
  APS_CUDA_CHECK(cudaGetLastError());
  return maxBits;
}

void decodeImpl(const Params& p, const uint8_t* in, int64_t n, float* out, bool add, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t len = blockLength(p, n);
  switch (p.kind) {
    case Params::Kind::Float:
      decodeElementsKernel<<<gridFor(n), kThreads, 0, s>>>(p.decode, p.width, in, n, nullptr, 1, out, add);
      break;
    case Params::Kind::BlockScaled:
      decodeElementsKernel<<<gridFor(n), kThreads, 0, s>>>(p.decode, p.width, in + blockCount(p, n), n, in, len, out,
                                                           add);
      break;
    case Params::Kind::Dettmers:
      dettmersDecodeKernel<<<gridFor(n), kThreads, 0, s>>>(p, in, n, len, out, add);
      break;
  }
  APS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void encode(const Params& p, const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx, void* stream) {
  if (n <= 0) return;
  const cudaStream_t s = asStream(stream);
  const Rounding r = roundingOf(p, ctx);
  const int64_t units = p.width == 0 ? (n + 1) / 2 : n;
  switch (p.kind) {
    case Params::Kind::Float:
      encodeElementsKernel<<<gridFor(units), kThreads, 0, s>>>(r, Plain{in}, n, out);
      APS_CUDA_CHECK(cudaGetLastError());
      return;
    case Params::Kind::BlockScaled: {
      const int64_t len = blockLength(p, n), blocks = blockCount(p, n);
      uint32_t* maxBits = blockMaxima(in, n, len, s);
      writeScalesKernel<<<gridFor(blocks), kThreads, 0, s>>>(maxBits, blocks, p.emax, out);
      encodeElementsKernel<<<gridFor(units), kThreads, 0, s>>>(r, Scaled{in, maxBits, len, p.emax}, n, out + blocks);
      APS_CUDA_CHECK(cudaGetLastError());
      APS_CUDA_CHECK(cudaFreeAsync(maxBits, s));
      return;
    }
    case Params::Kind::Dettmers: {
      const int64_t len = blockLength(p, n);
      uint32_t* maxBits = blockMaxima(in, n, len, s);
      dettmersEncodeKernel<<<gridFor(n), kThreads, 0, s>>>(p, in, n, len, maxBits, out);
      APS_CUDA_CHECK(cudaGetLastError());
      APS_CUDA_CHECK(cudaFreeAsync(maxBits, s));
      return;
    }
  }
}

void decode(const Params& p, const uint8_t* in, int64_t n, float* out, void* stream) {
  decodeImpl(p, in, n, out, false, asStream(stream));
}

void decodeAdd(const Params& p, const uint8_t* in, int64_t n, float* acc, void* stream) {
  decodeImpl(p, in, n, acc, true, asStream(stream));
}

void decodeAddEncode(const Params& p, const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                     const EncodeContext& ctx, void* stream) {
  if (n <= 0) return;
  const cudaStream_t s = asStream(stream);
  if (p.kind == Params::Kind::Float) {
    const int64_t units = p.width == 0 ? (n + 1) / 2 : n;
    encodeElementsKernel<<<gridFor(units), kThreads, 0, s>>>(roundingOf(p, ctx), Sum{p.decode, p.width, a, b}, n, out);
    APS_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // Block codecs need a block's whole sum before its scale is known, and out may alias a
  // or b: the sum goes through an fp32 scratch buffer, decoded in full before encoding.
  float* sum = nullptr;
  APS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sum), static_cast<size_t>(n) * sizeof(float), s));
  decodeImpl(p, a, n, sum, false, s);
  decodeImpl(p, b, n, sum, true, s);
  encode(p, sum, n, out, ctx, stream);
  APS_CUDA_CHECK(cudaFreeAsync(sum, s));
}

void absMaxBits(const float* data, int64_t n, uint32_t* out, void* stream) {
  const cudaStream_t s = asStream(stream);
  APS_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(uint32_t), s));
  if (n <= 0) return;
  const int64_t tiles = (n + kReduceTile - 1) / kReduceTile;
  const unsigned grid = static_cast<unsigned>(tiles < 65535 * 8 ? tiles : 65535 * 8);
  blockMaxKernel<<<grid, kReduceThreads, 0, s>>>(data, n, n, tiles, tiles, out);
  APS_CUDA_CHECK(cudaGetLastError());
}

void unscaleGradient(float* data, int64_t n, float inverse, ComputeFormat format, uint32_t* nonFinite, void* stream) {
  if (n <= 0) return;
  unscaleKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(data, n, inverse, format, nonFinite);
  APS_CUDA_CHECK(cudaGetLastError());
}

void scaleByPowerOfTwo(float* data, int64_t n, int shift, void* stream) {
  if (n <= 0 || shift == 0) return;
  scaleKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(data, n, shift);
  APS_CUDA_CHECK(cudaGetLastError());
}

void divideBy(float* data, int64_t n, float divisor, void* stream) {
  if (n <= 0) return;
  divideKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(data, n, divisor);
  APS_CUDA_CHECK(cudaGetLastError());
}

void addInto(float* acc, const float* x, int64_t n, void* stream) {
  if (n <= 0) return;
  addIntoKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(acc, x, n);
  APS_CUDA_CHECK(cudaGetLastError());
}

void multiplyBy(float* data, int64_t n, float factor, void* stream) {
  if (n <= 0) return;
  multiplyKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(data, n, factor);
  APS_CUDA_CHECK(cudaGetLastError());
}

void countNotBelow(const float* data, int64_t n, float limit, unsigned long long* count, void* stream) {
  if (n <= 0) return;
  countNotBelowKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(data, n, limit, count);
  APS_CUDA_CHECK(cudaGetLastError());
}

void feedbackResidual(const kernels::RoundingParams& rounding, RoundingMode mode, const float* intended, int64_t n,
                      const EncodeContext& ctx, int shift, float scale, float* residual, void* stream) {
  if (n <= 0) return;
  feedbackResidualKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(rounding, mode, intended, n, ctx, shift, scale,
                                                                        residual);
  APS_CUDA_CHECK(cudaGetLastError());
}

void quantizationCounts(const kernels::RoundingParams& rounding, RoundingMode mode, const float* x,
                        const float* quantized, int64_t n, int shift, const EncodeContext& ctx, float maxValue,
                        kernels::CountsPartial* out, void* stream) {
  if (n <= 0) return;
  const int64_t chunks = kernels::chunksOf(n);
  const kernels::CountSpec spec{rounding, mode, ctx.seed, ctx.stream, ctx.offset, shift, maxValue};
  quantizationCountsKernel<<<gridFor(chunks), kThreads, 0, asStream(stream)>>>(spec, x, quantized, n, chunks, out);
  APS_CUDA_CHECK(cudaGetLastError());
}
void compareSums(const float* lp, const float* exact, int64_t n, kernels::CompareSums* out, void* stream) {
  if (n <= 0) return;
  const int64_t chunks = kernels::chunksOf(n);
  compareSumsKernel<<<gridFor(chunks), kThreads, 0, asStream(stream)>>>(lp, exact, n, chunks, out);
  APS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace aps::precision::cuda
