#pragma once

#include "framework/tensor/NamedTensor.h"

#include <map>
#include <string>
#include <string_view>

namespace aps::io {

// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// "__metadata__": {"key": "value"}}, then the raw little-endian tensor bytes; offsets are
// relative to the start of that byte buffer.
struct SafetensorsContents {
  NamedTensors tensors;  // in header order (for files we write: the order given to save)
  std::map<std::string, std::string> metadata;
};

// Writes atomically: to a temporary file in the same directory, flushed and fsync'ed, then
// renamed over `path`, so a crash never leaves a half-written file. Tensors are written in
// the given order; names must be unique and non-empty.
void saveSafetensors(const std::string& path, const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file. Every problem (truncated file, oversized or malformed
// header, unsupported dtype, offsets out of range or overlapping, size mismatch) throws
// aps::Error naming the file and the problem.
SafetensorsContents loadSafetensors(const std::string& path);

// A human-readable table: metadata, then one line per tensor (name, dtype, shape, bytes and,
// for floating-point tensors, min / max / mean / number of non-finite values).
std::string describeSafetensors(const SafetensorsContents& contents);

// "F32", "F16", "BF16", "U8", "I32", "I64"; and back (throws naming the value).
std::string_view safetensorsDType(DType dtype);
DType parseSafetensorsDType(std::string_view name);

}  // namespace aps::io
