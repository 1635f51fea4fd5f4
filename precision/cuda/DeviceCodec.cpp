#include "precision/cuda/DeviceCodec.h"

#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/BlockScaledCodec.h"
#include "precision/DettmersCodec.h"
#include "precision/FloatCodec.h"

namespace aps::precision::cuda {

namespace {

void setElements(DeviceCodecParams& p, const FloatCodec& codec) {
  p.rounding = codec.roundingParams();
  p.decode = codec.decodeParams();
  p.mode = codec.rounding();
  p.width = codec.bytesPerValue();
}

}  // namespace

bool deviceCodecsCompiled() {
#if defined(APS_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

size_t encodedBytes(const DeviceCodecParams& p, int64_t n) {
  APS_ASSERT(n >= 0);
  const auto elementBytes = [&](int64_t m) {
    return p.width == 0 ? static_cast<size_t>((m + 1) / 2) : static_cast<size_t>(m) * static_cast<size_t>(p.width);
  };
  if (p.kind == DeviceCodecParams::Kind::Float) return elementBytes(n);
  if (n == 0) return 0;
  const int64_t len = p.blockSize > 0 ? p.blockSize : n;
  const int64_t blocks = (n + len - 1) / len;
  if (p.kind == DeviceCodecParams::Kind::BlockScaled) return static_cast<size_t>(blocks) + elementBytes(n);
  return static_cast<size_t>(n + 4 * blocks);
}

DeviceCodec::DeviceCodec(const CodecSpec& spec) : DeviceCodec(*makeCodec(spec)) {}

DeviceCodec::DeviceCodec(const Codec& codec) : name_(codec.name()) {
  if (const auto* f = dynamic_cast<const FloatCodec*>(&codec)) {
    params_.kind = DeviceCodecParams::Kind::Float;
    setElements(params_, *f);
  } else if (const auto* b = dynamic_cast<const BlockScaledCodec*>(&codec)) {
    params_.kind = DeviceCodecParams::Kind::BlockScaled;
    setElements(params_, b->elements());
    params_.emax = b->element().maxExponent();
    params_.blockSize = b->blockSize();
  } else if (const auto* d = dynamic_cast<const DettmersCodec*>(&codec)) {
    params_.kind = DeviceCodecParams::Kind::Dettmers;
    params_.blockSize = d->blockSize();
    params_.dettmersTop = d->topCode();
    for (int k = 0; k < 256; ++k) {
      params_.codeBook[k] = d->codeBook()[static_cast<size_t>(k)];
      params_.midpoints[k] = d->midpoints()[static_cast<size_t>(k)];
    }
  } else {
    APS_FAIL("codec {} has no CUDA form (float, block-scaled and Dettmers codecs have)", codec.name());
  }
}

void DeviceCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx, void* stream) const {
  cuda::encode(params_, in, n, out, ctx, stream);
}

void DeviceCodec::decode(const uint8_t* in, int64_t n, float* out, void* stream) const {
  cuda::decode(params_, in, n, out, stream);
}

void DeviceCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc, void* stream) const {
  cuda::decodeAdd(params_, in, n, acc, stream);
}

void DeviceCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out, const EncodeContext& ctx,
                                  void* stream) const {
  cuda::decodeAddEncode(params_, a, b, n, out, ctx, stream);
}

std::vector<uint32_t> absMaxBitsOf(std::span<const DeviceRange> ranges, int device) {
  std::vector<uint32_t> bits(ranges.size(), 0);
  if (ranges.empty()) return bits;
  // From the caching allocator's pool of this stream: released only after the wait below.
  aps::cuda::DeviceScratch out(bits.size() * sizeof(uint32_t), device);
  auto* outBits = static_cast<uint32_t*>(out.data());
  for (size_t i = 0; i < ranges.size(); ++i)
    absMaxBits(ranges[i].data, ranges[i].n, outBits + i, aps::cuda::currentStream());
  aps::cuda::copySync(bits.data(), outBits, bits.size() * sizeof(uint32_t), aps::cuda::CopyKind::DeviceToHost);
  return bits;
}

std::vector<int64_t> countsNotBelowOf(std::span<const DeviceRange> ranges, std::span<const float> limits, int device) {
  APS_CHECK(ranges.size() == limits.size(), "countsNotBelowOf: {} ranges, {} limits", ranges.size(), limits.size());
  std::vector<int64_t> counts(ranges.size(), 0);
  if (ranges.empty()) return counts;
  std::vector<unsigned long long> read(ranges.size(), 0);
  aps::cuda::DeviceScratch out(read.size() * sizeof(unsigned long long), device);
  auto* outCounts = static_cast<unsigned long long*>(out.data());
  aps::cuda::zeroAsync(outCounts, out.bytes(), aps::cuda::currentStream());
  for (size_t i = 0; i < ranges.size(); ++i)
    countNotBelow(ranges[i].data, ranges[i].n, limits[i], outCounts + i, aps::cuda::currentStream());
  aps::cuda::copySync(read.data(), outCounts, out.bytes(), aps::cuda::CopyKind::DeviceToHost);
  for (size_t i = 0; i < read.size(); ++i) counts[i] = static_cast<int64_t>(read[i]);
  return counts;
}

namespace {
// Where each range's chunks start among all ranges' (kernels::chunksOf), and the total at the end.
template <class Range>
std::vector<int64_t> chunkStarts(std::span<const Range> ranges) {
  std::vector<int64_t> first(ranges.size() + 1, 0);
  for (size_t i = 0; i < ranges.size(); ++i) first[i + 1] = first[i] + kernels::chunksOf(ranges[i].n);
  return first;
}
}  // namespace

std::vector<QuantizationCounts> quantizationCountsOf(std::span<const ShiftedRange> ranges,
                                                     const kernels::RoundingParams& rounding, RoundingMode mode,
                                                     float maxValue, int device) {
  std::vector<QuantizationCounts> counts(ranges.size());
  const std::vector<int64_t> first = chunkStarts(ranges);
  if (first.back() == 0) return counts;
  std::vector<kernels::CountsPartial> partials(static_cast<size_t>(first.back()));
  aps::cuda::DeviceScratch out(partials.size() * sizeof(kernels::CountsPartial), device);
  auto* outPartials = static_cast<kernels::CountsPartial*>(out.data());
  for (size_t i = 0; i < ranges.size(); ++i)
    quantizationCounts(rounding, mode, ranges[i].data, ranges[i].quantized, ranges[i].n, ranges[i].shift,
                       EncodeContext{}, maxValue, outPartials + first[i], aps::cuda::currentStream());
  aps::cuda::copySync(partials.data(), outPartials, out.bytes(), aps::cuda::CopyKind::DeviceToHost);
  for (size_t i = 0; i < ranges.size(); ++i)
    for (int64_t c = first[i]; c < first[i + 1]; ++c)
      counts[i] += QuantizationCounts::fromPartial(partials[static_cast<size_t>(c)]);
  return counts;
}

std::vector<kernels::CompareSums> compareSumsOf(std::span<const ComparedRange> ranges, int device) {
  std::vector<kernels::CompareSums> sums(ranges.size());
  const std::vector<int64_t> first = chunkStarts(ranges);
  if (first.back() == 0) return sums;
  std::vector<kernels::CompareSums> partials(static_cast<size_t>(first.back()));
  aps::cuda::DeviceScratch out(partials.size() * sizeof(kernels::CompareSums), device);
  auto* outPartials = static_cast<kernels::CompareSums*>(out.data());
  for (size_t i = 0; i < ranges.size(); ++i)
    compareSums(ranges[i].lp, ranges[i].exact, ranges[i].n, outPartials + first[i], aps::cuda::currentStream());
  aps::cuda::copySync(partials.data(), outPartials, out.bytes(), aps::cuda::CopyKind::DeviceToHost);
  for (size_t i = 0; i < ranges.size(); ++i)
    for (int64_t c = first[i]; c < first[i + 1]; ++c) kernels::addSums(sums[i], partials[static_cast<size_t>(c)]);
  return sums;
}

DeviceMemoryCodec::DeviceMemoryCodec(std::shared_ptr<const Codec> codec) : codec_(std::move(codec)) {
  APS_CHECK(codec_ != nullptr, "DeviceMemoryCodec: needs a codec");
  if (!codec_->encodesFp32Bits()) device_.emplace(*codec_);
}

// The fp32-bits path: bytes are the values (encode and decode copy), and a decodeAdd is
// acc + value in fp32, the CPU codec's acc[i] += v.
void DeviceMemoryCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  if (n <= 0) return;
  if (device_) return device_->encode(in, n, out, ctx, aps::cuda::currentStream());
  aps::cuda::copyAsync(out, in, static_cast<size_t>(n) * sizeof(float), aps::cuda::CopyKind::DeviceToDevice,
                       aps::cuda::currentStream());
}

void DeviceMemoryCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  if (n <= 0) return;
  if (device_) return device_->decode(in, n, out, aps::cuda::currentStream());
  aps::cuda::copyAsync(out, in, static_cast<size_t>(n) * sizeof(float), aps::cuda::CopyKind::DeviceToDevice,
                       aps::cuda::currentStream());
}

void DeviceMemoryCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  if (n <= 0) return;
  if (device_) return device_->decodeAdd(in, n, acc, aps::cuda::currentStream());
  aps::cuda::addFloatsAsync(acc, acc, reinterpret_cast<const float*>(in), n, aps::cuda::currentStream());
}

void DeviceMemoryCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                        const EncodeContext& ctx) const {
  if (n <= 0) return;
  if (device_) return device_->decodeAddEncode(a, b, n, out, ctx, aps::cuda::currentStream());
  aps::cuda::addFloatsAsync(reinterpret_cast<float*>(out), reinterpret_cast<const float*>(a),
                            reinterpret_cast<const float*>(b), n, aps::cuda::currentStream());
}

}  // namespace aps::precision::cuda
