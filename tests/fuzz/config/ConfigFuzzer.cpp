// libFuzzer harness for the aps_train YAML config: parsing, schema validation, the resolved
// YAML and hashes, and the precision formats the config names (validated by precision/).
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
    (void)aps::precision::CodecSpec::fromYaml(config.precision.format);
    for (const auto& rule : config.precision.hybrid) (void)aps::precision::CodecSpec::fromYaml(rule.format);
  } catch (const aps::Error&) {
  }
  return 0;
}
