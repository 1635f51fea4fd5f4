#include "data/FileBytes.h"

#include "framework/core/Error.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>

namespace aps::data {

namespace {

std::vector<uint8_t> gunzipFile(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  APS_CHECK(file != nullptr, "cannot open {}", path);
  gzbuffer(file, 1 << 20);
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int got = gzread(file, bytes.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      APS_FAIL("cannot read {}: {}", path, message);
    }
    bytes.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // A gzip stream cut short reads as a clean end of data but leaves Z_BUF_ERROR behind.
  int code = 0;
  const std::string message = gzerror(file, &code);
  gzclose(file);
  APS_CHECK(code == Z_OK || code == Z_STREAM_END, "cannot read {}: {} (truncated or corrupt gzip file)", path, message);
  return bytes;
}

}  // namespace

void requirePath(const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return;
  if (hint.empty()) APS_FAIL("{} not found: {}", what, path);
  APS_FAIL("{} not found: {} ({})", what, path, hint);
}

std::vector<uint8_t> readFileBytes(const std::string& path) {
  requirePath(path, "file", {});
  APS_CHECK(!std::filesystem::is_directory(path), "expected a file, found a directory: {}", path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  APS_CHECK(in.good(), "cannot open {}", path);
  const auto size = static_cast<size_t>(in.tellg());
  std::vector<uint8_t> bytes(size);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  APS_CHECK(in.good() || size == 0, "cannot read {}", path);
  // gzip member header: 1f 8b (RFC 1952, 2.3.1).
  if (size >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzipFile(path);
  return bytes;
}

}  // namespace aps::data
