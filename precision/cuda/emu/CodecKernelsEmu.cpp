// The device codecs of precision/cuda/CodecKernels.h on the emulated device
// (APS_CUDA_EMULATION=ON), built instead of CodecKernels.cu: the same per-unit steps
// (CodecElements.h) in host loops on the stream's thread, over the device memory's host view,
// so the wire bytes are those of a GPU and of the CPU codecs.
#include "framework/tensor/cuda/emu/EmuDevice.h"
#include "precision/cuda/CodecElements.h"
#include "precision/cuda/CodecKernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace aps::precision::cuda {

namespace {

using Params = DeviceCodecParams;
namespace emu = aps::cuda::emu;

int64_t blockLength(const Params& p, int64_t n) { return p.blockSize > 0 ? p.blockSize : n; }
int64_t blockCount(const Params& p, int64_t n) { return (n + blockLength(p, n) - 1) / blockLength(p, n); }

std::vector<uint32_t> blockMaxima(const float* in, int64_t n, int64_t len) {
  std::vector<uint32_t> maxBits(static_cast<size_t>((n + len - 1) / len), 0u);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t& m = maxBits[static_cast<size_t>(i / len)];
    m = std::max(m, kernels::absBits(in[i]));
  }
  return maxBits;
}

template <class Source>
void encodeElements(const elements::Rounding& r, const Source& src, int64_t n, uint8_t* out) {
  const int64_t units = r.width == 0 ? (n + 1) / 2 : n;
  for (int64_t u = 0; u < units; ++u) elements::encodeUnit(r, src, n, u, out);
}

// encode on host views (the stream's thread).
void encodeHost(const Params& p, const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) {
  const elements::Rounding r = elements::roundingOf(p, ctx);
  switch (p.kind) {
    case Params::Kind::Float:
      encodeElements(r, elements::Plain{in}, n, out);
      return;
    case Params::Kind::BlockScaled: {
      const int64_t len = blockLength(p, n), blocks = blockCount(p, n);
      const std::vector<uint32_t> maxBits = blockMaxima(in, n, len);
      for (int64_t b = 0; b < blocks; ++b) {
        out[b] = static_cast<uint8_t>(kernels::blockScaleCode(maxBits[static_cast<size_t>(b)], p.emax));
      }
      encodeElements(r, elements::Scaled{in, maxBits.data(), len, p.emax}, n, out + blocks);
      return;
    }
    case Params::Kind::Dettmers: {
      const int64_t len = blockLength(p, n);
      const std::vector<uint32_t> maxBits = blockMaxima(in, n, len);
      for (int64_t i = 0; i < n; ++i) {
        elements::dettmersEncodeElement(p.midpoints, p.dettmersTop, in, i, len, maxBits.data(), out);
      }
      return;
    }
  }
}

void decodeHost(const Params& p, const uint8_t* in, int64_t n, float* out, bool add) {
  const int64_t len = blockLength(p, n);
  switch (p.kind) {
    case Params::Kind::Float:
      for (int64_t i = 0; i < n; ++i) elements::decodeElement(p.decode, p.width, in, i, nullptr, 1, out, add);
      return;
    case Params::Kind::BlockScaled: {
      const uint8_t* values = in + blockCount(p, n);
      for (int64_t i = 0; i < n; ++i) elements::decodeElement(p.decode, p.width, values, i, in, len, out, add);
      return;
    }
    case Params::Kind::Dettmers:
      for (int64_t i = 0; i < n; ++i) elements::dettmersDecodeElement(p.codeBook, in, i, len, out, add);
      return;
  }
}

void queueDecode(const Params& p, const uint8_t* in, int64_t n, float* out, bool add, void* stream) {
  if (n <= 0) return;
  const int64_t bytes = static_cast<int64_t>(encodedBytes(p, n));
  emu::view(in, bytes), emu::view(out, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream),
               [p, in, n, out, add, bytes] { decodeHost(p, emu::view(in, bytes), n, emu::view(out, n), add); });
}

}  // namespace

void encode(const Params& p, const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx, void* stream) {
  if (n <= 0) return;
  const int64_t bytes = static_cast<int64_t>(encodedBytes(p, n));
  emu::view(in, n), emu::view(out, bytes);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream),
               [p, in, n, out, ctx, bytes] { encodeHost(p, emu::view(in, n), n, emu::view(out, bytes), ctx); });
}

void decode(const Params& p, const uint8_t* in, int64_t n, float* out, void* stream) {
  queueDecode(p, in, n, out, false, stream);
}

void decodeAdd(const Params& p, const uint8_t* in, int64_t n, float* acc, void* stream) {
  queueDecode(p, in, n, acc, true, stream);
}

void decodeAddEncode(const Params& p, const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                     const EncodeContext& ctx, void* stream) {
  if (n <= 0) return;
  const int64_t bytes = static_cast<int64_t>(encodedBytes(p, n));
  emu::view(a, bytes), emu::view(b, bytes), emu::view(out, bytes);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [p, a, b, n, out, ctx, bytes] {
    const uint8_t *x = emu::view(a, bytes), *y = emu::view(b, bytes);
    uint8_t* o = emu::view(out, bytes);
    if (p.kind == Params::Kind::Float) {
      encodeElements(elements::roundingOf(p, ctx), elements::Sum{p.decode, p.width, x, y}, n, o);
      return;
    }
    // As on the GPU: a block codec's sum goes through fp32 scratch, decoded in full first.
    std::vector<float> sum(static_cast<size_t>(n));
    decodeHost(p, x, n, sum.data(), false);
    decodeHost(p, y, n, sum.data(), true);
    encodeHost(p, sum.data(), n, o, ctx);
  });
}

void absMaxBits(const float* data, int64_t n, uint32_t* out, void* stream) {
  emu::view(data, n), emu::view(out, 1);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [data, n, out] {
    const float* x = emu::view(data, n);
    uint32_t m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, kernels::absBits(x[i]));
    *emu::view(out, 1) = m;
  });
}

void unscaleGradient(float* data, int64_t n, float inverse, ComputeFormat format, uint32_t* nonFinite, void* stream) {
  if (n <= 0) return;
  emu::view(data, n), emu::view(nonFinite, 1);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    float* x = emu::view(data, n);
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      const float g = x[i] * inverse;
      bad |= !std::isfinite(g);
      x[i] = format == ComputeFormat::Fp16       ? kernels::roundFp16(g)
             : format == ComputeFormat::BFloat16 ? kernels::roundBf16(g)
                                                 : g;
    }
    if (bad) *emu::view(nonFinite, 1) = 1u;
  });
}

void scaleByPowerOfTwo(float* data, int64_t n, int shift, void* stream) {
  if (n <= 0 || shift == 0) return;
  emu::view(data, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    float* x = emu::view(data, n);
    for (int64_t i = 0; i < n; ++i) x[i] = kernels::scaleByPow2(x[i], shift);
  });
}

void divideBy(float* data, int64_t n, float divisor, void* stream) {
  if (n <= 0) return;
  emu::view(data, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    float* x = emu::view(data, n);
    for (int64_t i = 0; i < n; ++i) x[i] /= divisor;
  });
}

void addInto(float* acc, const float* x, int64_t n, void* stream) {
  if (n <= 0) return;
  emu::view(acc, n), emu::view(x, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    float* a = emu::view(acc, n);
    const float* v = emu::view(x, n);
    for (int64_t i = 0; i < n; ++i) a[i] = addAsX86(a[i], v[i]);
  });
}

void multiplyBy(float* data, int64_t n, float factor, void* stream) {
  if (n <= 0) return;
  emu::view(data, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    float* x = emu::view(data, n);
    for (int64_t i = 0; i < n; ++i) x[i] = nanAsX86(x[i] * factor, x[i], factor);
  });
}

void countNotBelow(const float* data, int64_t n, float limit, unsigned long long* count, void* stream) {
  if (n <= 0) return;
  emu::view(data, n), emu::view(count, 1);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    const float* x = emu::view(data, n);
    unsigned long long c = 0;
    for (int64_t i = 0; i < n; ++i) c += !(bitCast<float>(kernels::absBits(x[i])) < limit);
    *emu::view(count, 1) += c;
  });
}

void feedbackResidual(const kernels::RoundingParams& rounding, RoundingMode mode, const float* intended, int64_t n,
                      const EncodeContext& ctx, int shift, float scale, float* residual, void* stream) {
  if (n <= 0) return;
  emu::view(intended, n), emu::view(residual, n);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    const float* x = emu::view(intended, n);
    float* r = emu::view(residual, n);
    for (int64_t i = 0; i < n; ++i) {
      const float q = kernels::quantizedValue(x[i], i, mode, rounding, ctx.seed, ctx.stream, ctx.offset);
      r[i] = kernels::feedbackResidual(x[i], q, shift, scale);
    }
  });
}

void quantizationCounts(const kernels::RoundingParams& rounding, RoundingMode mode, const float* x,
                        const float* quantized, int64_t n, int shift, const EncodeContext& ctx, float maxValue,
                        kernels::CountsPartial* out, void* stream) {
  if (n <= 0) return;
  const int64_t chunks = kernels::chunksOf(n);
  const kernels::CountSpec spec{rounding, mode, ctx.seed, ctx.stream, ctx.offset, shift, maxValue};
  emu::view(x, n), emu::view(quantized, quantized != nullptr ? n : 0), emu::view(out, chunks);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    const float* v = emu::view(x, n);
    const float* q = quantized != nullptr ? emu::view(quantized, n) : nullptr;
    kernels::CountsPartial* o = emu::view(out, chunks);
    for (int64_t c = 0; c < chunks; ++c) o[c] = kernels::countChunk(spec, v, q, n, c);
  });
}
void compareSums(const float* lp, const float* exact, int64_t n, kernels::CompareSums* out, void* stream) {
  if (n <= 0) return;
  const int64_t chunks = kernels::chunksOf(n);
  emu::view(lp, n), emu::view(exact, n), emu::view(out, chunks);
  emu::enqueue(static_cast<aps::cuda::StreamHandle>(stream), [=] {
    const float* a = emu::view(lp, n);
    const float* b = emu::view(exact, n);
    kernels::CompareSums* o = emu::view(out, chunks);
    for (int64_t c = 0; c < chunks; ++c) o[c] = kernels::compareChunk(a, b, n, c);
  });
}

}  // namespace aps::precision::cuda
