// libFuzzer harness for train::loadCheckpoint: a checkpoint is a safetensors file whose
// metadata carries the position, config hash and CRC. Any input must load or throw aps::Error.
#include "framework/core/Error.h"
#include "framework/train/Checkpoint.h"
#include "tests/fuzz/FuzzFiles.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = aps::fuzz::writeScratchFile("checkpoint-0000000001.safetensors", data, size);
  try {
    const auto c = aps::train::loadCheckpoint(path);
    (void)c.section("model");
  } catch (const aps::Error&) {
  }
  return 0;
}
