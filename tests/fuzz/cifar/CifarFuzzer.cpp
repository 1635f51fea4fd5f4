// libFuzzer harness for the CIFAR binary reader: the first byte picks CIFAR-10, CIFAR-100
// fine or coarse; the rest is the test file. Every record that loads is read back.
#include "data/CifarSource.h"
#include "framework/core/Error.h"
#include "tests/fuzz/FuzzFiles.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using Variant = aps::data::CifarSource::Variant;
  const Variant variant = data[0] % 3 == 0   ? Variant::kCifar10
                          : data[0] % 3 == 1 ? Variant::kCifar100Fine
                                             : Variant::kCifar100Coarse;
  const char* name = variant == Variant::kCifar10 ? "test_batch.bin" : "test.bin";
  aps::fuzz::writeScratchFile(name, data + 1, size - 1);
  try {
    const aps::data::CifarSource source(aps::fuzz::scratchDir().string(), "test", variant);
    aps::data::Example example;
    for (int64_t i = 0; i < source.size(); ++i) {
      source.read(i, example);
      (void)source.describe(i);
    }
  } catch (const aps::Error&) {
  }
  return 0;
}
