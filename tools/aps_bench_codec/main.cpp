// aps_bench_codec: encode and decode rates of wire codecs against the rate of copying the
// same fp32 buffer (memcpy), measured in one run on one thread, printed as JSON.
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Best (shortest) time in seconds of `repeats` runs of fn.
template <typename Fn>
double bestSeconds(int repeats, const Fn& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encode/decode rates of wire codecs vs memcpy of the fp32 buffer (JSON)", "aps_bench_codec"};
  int64_t count = int64_t{1} << 24;
  int repeats = 5;
  std::string codecs = "e4m3,e5m2";
  app.add_option("--count", count, "values per buffer");
  app.add_option("--repeats", repeats, "timed runs per measurement (the best counts)");
  app.add_option("--codecs", codecs, "comma-separated codec names (makeCodec)");
  return aps::runTool(app, argc, argv, [&] {
    APS_CHECK(count > 0, "--count {} must be > 0", count);
    APS_CHECK(repeats > 0, "--repeats {} must be > 0", repeats);
    std::vector<float> in(static_cast<size_t>(count)), out(in.size());
    aps::Rng rng(1);
    for (auto& v : in) v = rng.normal(0.0f, 10.0f);
    std::memcpy(out.data(), in.data(), in.size() * sizeof(float));  // touch every page first
    const double copy = bestSeconds(repeats, [&] { std::memcpy(out.data(), in.data(), in.size() * sizeof(float)); });
    const double copyRate = static_cast<double>(count) / copy;
    std::string entries;
    std::stringstream names(codecs);
    for (std::string name; std::getline(names, name, ',');) {
      const auto codec = aps::precision::makeCodec(name);
      std::vector<uint8_t> bytes(codec->encodedBytes(count));
      codec->encode(in.data(), count, bytes.data());
      const double enc = bestSeconds(repeats, [&] { codec->encode(in.data(), count, bytes.data()); });
      const double dec = bestSeconds(repeats, [&] { codec->decode(bytes.data(), count, out.data()); });
      const double encRate = static_cast<double>(count) / enc, decRate = static_cast<double>(count) / dec;
      if (!entries.empty()) entries += ",\n";
      entries += fmt::format(
          "    {{\"codec\": \"{}\", \"encode_values_per_s\": {:.4g}, \"decode_values_per_s\": {:.4g}, "
          "\"encode_vs_copy\": {:.3f}, \"decode_vs_copy\": {:.3f}}}",
          codec->name(), encRate, decRate, encRate / copyRate, decRate / copyRate);
    }
    fmt::print(
        "{{\n  \"values\": {},\n  \"repeats\": {},\n  \"memcpy_values_per_s\": {:.4g},\n  \"codecs\": [\n{}\n  ]\n}}\n",
        count, repeats, copyRate, entries);
  });
}
