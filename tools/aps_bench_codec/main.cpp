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
#include <memory>
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
    std::vector<std::unique_ptr<aps::precision::Codec>> list;
    std::stringstream names(codecs);
    for (std::string name; std::getline(names, name, ',');) list.push_back(aps::precision::makeCodec(name));
    std::vector<std::vector<uint8_t>> bytes;
    for (const auto& codec : list) {
      bytes.emplace_back(codec->encodedBytes(count));
      codec->encode(in.data(), count, bytes.back().data());
    }
    // Interleaved: every repeat times the copy and each codec back to back, so load from
    // other processes affects all of them alike; the best time of each counts.
    double copy = 1e30;
    std::vector<double> enc(list.size(), 1e30), dec(list.size(), 1e30);
    for (int r = 0; r < repeats; ++r) {
      copy = std::min(copy, bestSeconds(1, [&] { std::memcpy(out.data(), in.data(), in.size() * sizeof(float)); }));
      for (size_t c = 0; c < list.size(); ++c) {
        enc[c] = std::min(enc[c], bestSeconds(1, [&] { list[c]->encode(in.data(), count, bytes[c].data()); }));
        dec[c] = std::min(dec[c], bestSeconds(1, [&] { list[c]->decode(bytes[c].data(), count, out.data()); }));
      }
    }
    const double copyRate = static_cast<double>(count) / copy;
    std::string entries;
    for (size_t c = 0; c < list.size(); ++c) {
      const double encRate = static_cast<double>(count) / enc[c], decRate = static_cast<double>(count) / dec[c];
      if (!entries.empty()) entries += ",\n";
      entries += fmt::format(
          "    {{\"codec\": \"{}\", \"encode_values_per_s\": {:.4g}, \"decode_values_per_s\": {:.4g}, "
          "\"encode_vs_copy\": {:.3f}, \"decode_vs_copy\": {:.3f}}}",
          list[c]->name(), encRate, decRate, encRate / copyRate, decRate / copyRate);
    }
    fmt::print(
        "{{\n  \"values\": {},\n  \"repeats\": {},\n  \"memcpy_values_per_s\": {:.4g},\n  \"codecs\": [\n{}\n  ]\n}}\n",
        count, repeats, copyRate, entries);
  });
}
