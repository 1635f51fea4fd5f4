#include "framework/io/Safetensors.h"

#include "framework/io/AtomicFile.h"

#include "framework/core/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

namespace aps::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

// The reference implementation rejects headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypes[] = {{DType::Float32, "F32"}, {DType::Float16, "F16"}, {DType::BFloat16, "BF16"},
                                 {DType::UInt8, "U8"},    {DType::Int32, "I32"},   {DType::Int64, "I64"}};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

uint64_t parseOffset(const std::string& path, const std::string& name, const nlohmann::json& v) {
  APS_CHECK(v.is_number_unsigned(), "{}: tensor '{}' has a data offset that is not a non-negative integer", path, name);
  return v.get<uint64_t>();
}

Entry parseEntry(const std::string& path, const std::string& name, const nlohmann::json& spec, uint64_t dataBytes) {
  APS_CHECK(spec.is_object(), "{}: header entry '{}' is not an object", path, name);
  APS_CHECK(spec.contains("dtype") && spec["dtype"].is_string(), "{}: tensor '{}' has no dtype string", path, name);
  APS_CHECK(spec.contains("shape") && spec["shape"].is_array(), "{}: tensor '{}' has no shape array", path, name);
  APS_CHECK(spec.contains("data_offsets") && spec["data_offsets"].is_array() && spec["data_offsets"].size() == 2,
            "{}: tensor '{}' needs data_offsets [begin, end]", path, name);
  Entry e;
  e.name = name;
  const std::string dtype = spec["dtype"].get<std::string>();
  try {
    e.dtype = parseSafetensorsDType(dtype);
  } catch (const Error&) {
    APS_FAIL("{}: tensor '{}' has unsupported dtype '{}' (supported: F32, F16, BF16, U8, I32, I64)", path, name, dtype);
  }
  uint64_t elements = 1;
  for (const auto& d : spec["shape"]) {
    APS_CHECK(d.is_number_unsigned(), "{}: tensor '{}' has a shape entry that is not a non-negative integer", path,
              name);
    const uint64_t size = d.get<uint64_t>();
    APS_CHECK(size == 0 || elements <= dataBytes / size, "{}: tensor '{}' has a shape larger than the file", path,
              name);
    elements *= size;
    e.shape.push_back(static_cast<int64_t>(size));
  }
  e.begin = parseOffset(path, name, spec["data_offsets"][0]);
  e.end = parseOffset(path, name, spec["data_offsets"][1]);
  APS_CHECK(e.begin <= e.end && e.end <= dataBytes,
            "{}: tensor '{}' has data_offsets [{}, {}] outside the {}-byte data section", path, name, e.begin, e.end,
            dataBytes);
  APS_CHECK(e.end - e.begin == elements * dtypeSize(e.dtype),
            "{}: tensor '{}' of shape {} and dtype {} needs {} bytes but data_offsets span {}", path, name,
            formatShape(e.shape), dtype, elements * dtypeSize(e.dtype), e.end - e.begin);
  return e;
}

}  // namespace

std::string_view safetensorsDType(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  APS_FAIL("safetensors: no name for dtype {}", dtypeName(dtype));
}

DType parseSafetensorsDType(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  APS_FAIL("safetensors: unsupported dtype '{}' (supported: F32, F16, BF16, U8, I32, I64)", name);
}

void saveSafetensors(const std::string& path, const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<Tensor> contiguous;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    APS_CHECK(!name.empty() && name != kMetadataKey, "{}: invalid tensor name '{}'", path, name);
    APS_CHECK(names.insert(name).second, "{}: tensor name '{}' appears twice", path, name);
    APS_CHECK(tensor.defined(), "{}: tensor '{}' is undefined", path, name);
    APS_CHECK(tensor.device().isCpu(), "{}: tensor '{}' is not on the cpu", path, name);
    contiguous.push_back(tensor.contiguous());
    const uint64_t bytes = contiguous.back().buffer().bytes();
    header[name] = {{"dtype", safetensorsDType(tensor.dtype())},
                    {"shape", tensor.sizes()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  const uint64_t headerBytes = text.size();

  writeFileAtomically(path, [&](std::FILE* f) {
    bool ok = std::fwrite(&headerBytes, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    for (const Tensor& t : contiguous) {
      if (!ok) break;
      const BufferView b = t.buffer();
      ok = b.bytes() == 0 || std::fwrite(b.data, 1, b.bytes(), f) == b.bytes();
    }
    return ok;
  });
}

SafetensorsContents loadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  APS_CHECK(in.good(), "{}: cannot open for reading", path);
  in.seekg(0, std::ios::end);
  const auto fileBytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  APS_CHECK(fileBytes >= 8, "{}: truncated: {} bytes, shorter than the 8-byte header length", path, fileBytes);
  uint64_t headerBytes = 0;
  in.read(reinterpret_cast<char*>(&headerBytes), 8);
  APS_CHECK(headerBytes <= kMaxHeaderBytes, "{}: header length {} exceeds the {}-byte limit", path, headerBytes,
            kMaxHeaderBytes);
  APS_CHECK(headerBytes <= fileBytes - 8, "{}: truncated: header length {} but only {} bytes follow", path, headerBytes,
            fileBytes - 8);
  std::string text(headerBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(headerBytes));
  APS_CHECK(in.good(), "{}: cannot read the {}-byte header", path, headerBytes);
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    APS_FAIL("{}: malformed JSON header: {}", path, e.what());
  }
  APS_CHECK(header.is_object(), "{}: the header is not a JSON object", path);

  const uint64_t dataStart = 8 + headerBytes;
  const uint64_t dataBytes = fileBytes - dataStart;
  SafetensorsContents contents;
  std::vector<Entry> entries;
  for (const auto& [name, spec] : header.items()) {
    if (name == kMetadataKey) {
      APS_CHECK(spec.is_object(), "{}: __metadata__ is not an object", path);
      for (const auto& [key, value] : spec.items()) {
        APS_CHECK(value.is_string(), "{}: metadata '{}' is not a string", path, key);
        contents.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parseEntry(path, name, spec, dataBytes));
  }
  // Tensors may not share bytes (the format forbids overlapping ranges).
  std::vector<const Entry*> byOffset;
  for (const auto& e : entries) byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < byOffset.size(); ++i) {
    APS_CHECK(byOffset[i]->begin >= byOffset[i - 1]->end, "{}: tensors '{}' and '{}' overlap in the data section", path,
              byOffset[i - 1]->name, byOffset[i]->name);
  }
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) {
      in.seekg(static_cast<std::streamoff>(dataStart + e.begin));
      in.read(static_cast<char*>(t.rawData()), static_cast<std::streamsize>(e.end - e.begin));
      APS_CHECK(in.good(), "{}: cannot read the data of tensor '{}'", path, e.name);
    }
    contents.tensors.push_back({e.name, t});
  }
  return contents;
}

std::string describeSafetensors(const SafetensorsContents& contents) {
  std::string out;
  for (const auto& [key, value] : contents.metadata) out += fmt::format("metadata {} = {}\n", key, value);
  size_t total = 0;
  for (const auto& [name, tensor] : contents.tensors) {
    const size_t bytes = tensor.buffer().bytes();
    total += bytes;
    out += fmt::format("{} {} {} {} bytes", name, safetensorsDType(tensor.dtype()), tensor.shapeString(), bytes);
    const bool floating =
        tensor.dtype() == DType::Float32 || tensor.dtype() == DType::Float16 || tensor.dtype() == DType::BFloat16;
    if (floating && tensor.numel() > 0) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0.0;
      int64_t finite = 0;
      for (float v : tensor.toFloatVector()) {
        if (!std::isfinite(v)) continue;
        lo = std::min<double>(lo, v);
        hi = std::max<double>(hi, v);
        sum += v;
        ++finite;
      }
      if (finite > 0) {
        out += fmt::format(" min {:.6g} max {:.6g} mean {:.6g}", lo, hi, sum / static_cast<double>(finite));
      }
      if (finite < tensor.numel()) out += fmt::format(" non-finite {}", tensor.numel() - finite);
    }
    out += "\n";
  }
  out += fmt::format("{} tensors, {} bytes\n", contents.tensors.size(), total);
  return out;
}

}  // namespace aps::io
