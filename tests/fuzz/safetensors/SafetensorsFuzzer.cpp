// libFuzzer harness for io::loadSafetensors (and the table aps_safetensors prints from it):
// any input must either load or throw aps::Error; crashes, leaks, UB and other exceptions
// are findings.
#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"
#include "tests/fuzz/FuzzFiles.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = aps::fuzz::writeScratchFile("input.safetensors", data, size);
  try {
    const auto contents = aps::io::loadSafetensors(path);
    (void)aps::io::describeSafetensors(contents);
  } catch (const aps::Error&) {
  }
  return 0;
}
