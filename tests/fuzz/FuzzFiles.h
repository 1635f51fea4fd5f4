#pragma once

// What every libFuzzer harness shares: the parsers under test read files, so each input is
// written to a file in a per-process scratch folder first (on tmpfs when /dev/shm exists).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace aps::fuzz {

// A scratch folder that lives as long as the fuzzing process.
inline const std::filesystem::path& scratchDir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    auto d = base / ("aps-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratchDir()); });
    return d;
  }();
  return dir;
}

// Writes `size` bytes to scratchDir()/name (replacing it) and returns the path.
inline std::string writeScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratchDir() / name).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
  return path;
}

}  // namespace aps::fuzz
