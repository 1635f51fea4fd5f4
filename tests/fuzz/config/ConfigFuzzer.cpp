// libFuzzer harness for the aps_train YAML config: parsing, schema validation, the resolved
// YAML and hashes, and the precision formats the config names (parsed as it loads).
// Any input must resolve or throw aps::Error naming the problem.
#include "framework/core/Error.h"
#include "framework/train/Config.h"
#include "precision/CodecSpec.h"
#include "tests/fuzz/FuzzFiles.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = aps::train::parseConfig(text, "fuzz.yaml");
    (void)aps::train::configHash(config);
    (void)aps::train::resumeHash(config);
    (void)aps::precision::makeCodec(config.precision.format.spec);
    for (const auto& rule : config.precision.hybrid) (void)aps::precision::makeCodec(rule.format.spec);
  } catch (const aps::Error&) {
  }
  return 0;
}
