#pragma once

// The host side of the CUDA wire codecs: a DeviceCodec is made from a CPU codec (FloatCodec,
// BlockScaledCodec or DettmersCodec, in any rounding mode) or a CodecSpec, and runs the same
// operations on device pointers with the same wire bytes (precision/cuda/CodecKernels.h).
// A plain C++ header; in a build without CUDA the operations throw aps::Error.

#include "precision/Codec.h"
#include "precision/CodecSpec.h"
#include "precision/QuantizationStats.h"
#include "precision/cuda/CodecKernels.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace aps::precision::cuda {

// True when this build has the CUDA codecs (aps was configured with CUDA).
bool deviceCodecsCompiled();

class DeviceCodec {
 public:
  // Throws aps::Error for a codec kind without a device form (none of makeCodec's).
  explicit DeviceCodec(const Codec& codec);
  explicit DeviceCodec(const CodecSpec& spec);

  const std::string& name() const { return name_; }  // the CPU codec's name
  size_t encodedBytes(int64_t n) const { return cuda::encodedBytes(params_, n); }

  // The Codec operations on device pointers, queued on `stream` (a cudaStream_t; nullptr:
  // the default stream).
  void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}, void* stream = nullptr) const;
  void decode(const uint8_t* in, int64_t n, float* out, void* stream = nullptr) const;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc, void* stream = nullptr) const;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out, const EncodeContext& ctx = {},
                       void* stream = nullptr) const;

  const DeviceCodecParams& params() const { return params_; }

 private:
  DeviceCodecParams params_;
  std::string name_;
};

// A range of n floats of device memory.
struct DeviceRange {
  const float* data = nullptr;
  int64_t n = 0;
};
// Each range's largest |value| as fp32 bits (absMaxBits: above 0x7f7fffff an inf or a NaN),
// measured on the calling thread's current stream (aps::cuda::currentStream()) of `device` and
// read back together: one wait, for that stream only.
std::vector<uint32_t> absMaxBitsOf(std::span<const DeviceRange> ranges, int device);

// Each range's count of values with !(|x| < limits[i]) (countNotBelow), read back together as
// absMaxBitsOf reads.
std::vector<int64_t> countsNotBelowOf(std::span<const DeviceRange> ranges, std::span<const float> limits, int device);

// A range of n floats of device memory to be read scaled by 2^shift, or (quantized set) with
// what quantizing made of them.
struct ShiftedRange {
  const float* data = nullptr;
  int64_t n = 0;
  int shift = 0;
  const float* quantized = nullptr;
};
// What quantizing each range (rounded with `mode`, random bits of EncodeContext{} from the
// range's start, as Quantizer::quantize draws them; or as given) does:
// precision::QuantizationCounts::measure of the scaled values and their quantized form, the
// same bits, read back together.
std::vector<QuantizationCounts> quantizationCountsOf(std::span<const ShiftedRange> ranges,
                                                     const kernels::RoundingParams& rounding, RoundingMode mode,
                                                     float maxValue, int device);

// Each pair of ranges' kernels::CompareSums (lp, exact: n values each), summed chunk after chunk
// as the host sums them, read back together.
struct ComparedRange {
  const float* lp = nullptr;
  const float* exact = nullptr;
  int64_t n = 0;
};
std::vector<kernels::CompareSums> compareSumsOf(std::span<const ComparedRange> ranges, int device);

// A Codec whose buffers are device memory: the CPU codec's format and promises (name,
// encodedBytes, splitGranule, encodesFp32Bits, ...) with every operation queued on the device's
// default stream, where aps's ops run, so that an all-reduce schedule written against Codec runs
// unchanged over device buffers (comm::AllReduceOptions::device). A codec of fp32 bits
// (Codec::encodesFp32Bits: the `native` all-reduce's) is copies and fp32 adds; any other takes
// its DeviceCodec form. Operations return before the device has run them, like kernel launches.
class DeviceMemoryCodec final : public Codec {
 public:
  // Throws aps::Error for a codec with no device form.
  explicit DeviceMemoryCodec(std::shared_ptr<const Codec> codec);

  std::string name() const override { return codec_->name(); }
  size_t encodedBytes(int64_t n) const override { return codec_->encodedBytes(n); }
  void encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx = {}) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override;
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const EncodeContext& ctx = {}) const override;
  int64_t splitGranule() const override { return codec_->splitGranule(); }
  bool roundTripsAlikeAtAnyCut() const override { return codec_->roundTripsAlikeAtAnyCut(); }
  bool encodesFp32Bits() const override { return codec_->encodesFp32Bits(); }

  const Codec& hostCodec() const { return *codec_; }

 private:
  std::shared_ptr<const Codec> codec_;
  std::optional<DeviceCodec> device_;  // empty for fp32 bits
};

}  // namespace aps::precision::cuda
