// aps_bench_codec: encode and decode rates of wire codecs against the rate of copying the
// same fp32 buffer (memcpy), measured in one run on one thread, printed as JSON; on the CPU
// also the reducers' decodeAdd and fused decodeAddEncode. With
// --device cuda: the CUDA codecs (precision/cuda/DeviceCodec.h) on GPU 0 against
// cudaMemcpy device to device, timed with CUDA events.
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/CodecSpec.h"
#include "precision/cuda/DeviceCodec.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#if defined(APS_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <array>
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

std::string codecEntry(const std::string& name, double encRate, double decRate, double copyRate) {
  return fmt::format(
      "    {{\"codec\": \"{}\", \"encode_values_per_s\": {:.4g}, \"decode_values_per_s\": {:.4g}, "
      "\"encode_vs_copy\": {:.3f}, \"decode_vs_copy\": {:.3f}}}",
      name, encRate, decRate, encRate / copyRate, decRate / copyRate);
}

// The entry with the reducers' fused steps: decodeAdd (acc += decode) and decodeAddEncode (one
// hop: encode(decode(a) + decode(b))), as rates and against the copy (what aps_perfmodel reads).
std::string fusedCodecEntry(const std::string& name, const double rates[4], double copyRate) {
  std::string entry = codecEntry(name, rates[0], rates[1], copyRate);
  entry.pop_back();  // the closing brace
  return entry + fmt::format(
                     ", \"decode_add_values_per_s\": {:.4g}, \"decode_add_encode_values_per_s\": {:.4g}, "
                     "\"decode_add_vs_copy\": {:.3f}, \"decode_add_encode_vs_copy\": {:.3f}}}",
                     rates[2], rates[3], rates[2] / copyRate, rates[3] / copyRate);
}

#if defined(APS_WITH_CUDA)
void cudaCheck(cudaError_t status, const char* what) {
  APS_CHECK(status == cudaSuccess, "--device cuda: {} failed: {}", what, cudaGetErrorString(status));
}

// Best time in seconds of `repeats` runs of fn on the default stream, by CUDA events.
template <typename Fn>
double bestDeviceSeconds(int repeats, const Fn& fn) {
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaCheck(cudaEventCreate(&start), "cudaEventCreate");
  cudaCheck(cudaEventCreate(&stop), "cudaEventCreate");
  fn();  // warm-up (first launch, allocator pools)
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    cudaCheck(cudaEventRecord(start), "cudaEventRecord");
    fn();
    cudaCheck(cudaEventRecord(stop), "cudaEventRecord");
    cudaCheck(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, static_cast<double>(ms) * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}
#endif

// The CUDA codecs' encode, decode and fused rates against cudaMemcpy device to device of the
// fp32 buffer (each as a fraction of that copy's rate).
void benchCuda(const std::vector<float>& in, const std::vector<std::string>& names, int repeats) {
  APS_CHECK(aps::cuda::compiledWithCuda() && aps::precision::cuda::deviceCodecsCompiled(),
            "--device cuda: this build of aps has no CUDA (configure it with the CUDA toolkit)");
  APS_CHECK(aps::cuda::deviceCount() > 0, "--device cuda: no CUDA device is visible on this machine");
#if defined(APS_WITH_CUDA)
  const auto count = static_cast<int64_t>(in.size());
  const size_t floatBytes = in.size() * sizeof(float);
  float* dIn = nullptr;
  float* dOut = nullptr;
  cudaCheck(cudaMalloc(reinterpret_cast<void**>(&dIn), floatBytes), "cudaMalloc");
  cudaCheck(cudaMalloc(reinterpret_cast<void**>(&dOut), floatBytes), "cudaMalloc");
  cudaCheck(cudaMemcpy(dIn, in.data(), floatBytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  const double copy = bestDeviceSeconds(
      repeats, [&] { cudaCheck(cudaMemcpyAsync(dOut, dIn, floatBytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); });
  const double copyRate = static_cast<double>(count) / copy;
  std::string entries;
  for (const auto& name : names) {
    const aps::precision::cuda::DeviceCodec codec(aps::precision::CodecSpec::parse(name));
    // Three encoded buffers: the encode's, a second operand and a hop's output (no aliasing).
    std::array<uint8_t*, 3> bytes{};
    for (uint8_t*& b : bytes)
      cudaCheck(cudaMalloc(reinterpret_cast<void**>(&b), codec.encodedBytes(count)), "cudaMalloc");
    const double enc = bestDeviceSeconds(repeats, [&] { codec.encode(dIn, count, bytes[0]); });
    const double dec = bestDeviceSeconds(repeats, [&] { codec.decode(bytes[0], count, dOut); });
    codec.encode(dIn, count, bytes[1]);
    const double add = bestDeviceSeconds(repeats, [&] { codec.decodeAdd(bytes[0], count, dOut); });
    const double hop = bestDeviceSeconds(repeats, [&] { codec.decodeAddEncode(bytes[0], bytes[1], count, bytes[2]); });
    for (uint8_t* b : bytes) cudaFree(b);
    if (!entries.empty()) entries += ",\n";
    const double rates[4] = {static_cast<double>(count) / enc, static_cast<double>(count) / dec,
                             static_cast<double>(count) / add, static_cast<double>(count) / hop};
    entries += fusedCodecEntry(codec.name(), rates, copyRate);
  }
  cudaFree(dIn);
  cudaFree(dOut);
  fmt::print(
      "{{\n  \"device\": \"{}\",\n  \"values\": {},\n  \"repeats\": {},\n  \"memcpy_d2d_values_per_s\": {:.4g},\n"
      "  \"codecs\": [\n{}\n  ]\n}}\n",
      aps::cuda::deviceDescription(0), count, repeats, copyRate, entries);
#else
  (void)in;
  (void)names;
  (void)repeats;
#endif
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
  std::string device = "cpu";
  app.add_option("--device", device,
                 "cpu (one thread, against memcpy) or cuda (the CUDA codecs on GPU 0, against cudaMemcpy device to "
                 "device; fails when the build has no CUDA or the machine no GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return aps::runTool(app, argc, argv, [&] {
    APS_CHECK(count > 0, "--count {} must be > 0", count);
    APS_CHECK(repeats > 0, "--repeats {} must be > 0", repeats);
    std::vector<float> in(static_cast<size_t>(count)), out(in.size());
    aps::Rng rng(1);
    for (auto& v : in) v = rng.normal(0.0f, 10.0f);
    if (device == "cuda") {
      std::vector<std::string> names;
      std::stringstream list(codecs);
      for (std::string name; std::getline(list, name, ',');) names.push_back(name);
      benchCuda(in, names, repeats);
      return;
    }
    std::memcpy(out.data(), in.data(), in.size() * sizeof(float));  // touch every page first
    std::vector<std::unique_ptr<aps::precision::Codec>> list;
    std::stringstream names(codecs);
    for (std::string name; std::getline(names, name, ',');) list.push_back(aps::precision::makeCodec(name));
    std::vector<std::vector<uint8_t>> bytes, sums;
    for (const auto& codec : list) {
      bytes.emplace_back(codec->encodedBytes(count));
      codec->encode(in.data(), count, bytes.back().data());
      sums.emplace_back(bytes.back());
    }
    // Interleaved: every repeat times the copy and each codec back to back, so load from
    // other processes affects all of them alike; the best time of each counts.
    double copy = 1e30;
    // Per codec: encode, decode, decodeAdd, decodeAddEncode.
    std::vector<std::array<double, 4>> best(list.size(), {1e30, 1e30, 1e30, 1e30});
    for (int r = 0; r < repeats; ++r) {
      copy = std::min(copy, bestSeconds(1, [&] { std::memcpy(out.data(), in.data(), in.size() * sizeof(float)); }));
      for (size_t c = 0; c < list.size(); ++c) {
        const auto& codec = *list[c];
        auto& t = best[c];
        t[0] = std::min(t[0], bestSeconds(1, [&] { codec.encode(in.data(), count, bytes[c].data()); }));
        t[1] = std::min(t[1], bestSeconds(1, [&] { codec.decode(bytes[c].data(), count, out.data()); }));
        t[2] = std::min(t[2], bestSeconds(1, [&] { codec.decodeAdd(bytes[c].data(), count, out.data()); }));
        t[3] = std::min(t[3], bestSeconds(1, [&] {
                          codec.decodeAddEncode(bytes[c].data(), bytes[c].data(), count, sums[c].data());
                        }));
      }
    }
    const double copyRate = static_cast<double>(count) / copy;
    std::string entries;
    for (size_t c = 0; c < list.size(); ++c) {
      double rates[4];
      for (int k = 0; k < 4; ++k) rates[k] = static_cast<double>(count) / best[c][static_cast<size_t>(k)];
      if (!entries.empty()) entries += ",\n";
      entries += fusedCodecEntry(list[c]->name(), rates, copyRate);
    }
    fmt::print(
        "{{\n  \"values\": {},\n  \"repeats\": {},\n  \"memcpy_values_per_s\": {:.4g},\n  \"codecs\": [\n{}\n  ]\n}}\n",
        count, repeats, copyRate, entries);
  });
}
