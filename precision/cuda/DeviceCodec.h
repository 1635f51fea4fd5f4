#pragma once

// The host side of the CUDA wire codecs: a DeviceCodec is made from a CPU codec (FloatCodec,
// BlockScaledCodec or DettmersCodec, in any rounding mode) or a CodecSpec, and runs the same
// operations on device pointers with the same wire bytes (precision/cuda/CodecKernels.h).
// A plain C++ header; in a build without CUDA the operations throw aps::Error.

#include "precision/Codec.h"
#include "precision/CodecSpec.h"
#include "precision/cuda/CodecKernels.h"

#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace aps::precision::cuda
