// aps_bench_ops: times the CPU convolution kernels on the layer shapes of a CIFAR ResNet-20
// (He et al., 2016) fed 1x28x28 images, and prints one JSON line per layer plus a total.
// torch_conv_bench.py next to this file times the same shapes in PyTorch. --peaks instead
// measures what the per-op breakdown (tools/perf/breakdown.py) holds ops against: SGEMM
// GFLOP/s (Eigen, the GEMM aps's convolutions use) and stream-copy GB/s (bytes read + written).
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Kernels.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>
#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Layer {
  std::string name;
  int64_t c, h, k, r, stride, pad;
  int count;        // how many times the layer occurs in the network
  bool needGradIn;  // the stem's input needs no gradient
};

// ResNet-20's convolutions for CxHxH inputs: a 3x3 stem, three stages of three basic blocks
// (16, 32, 64 channels), 1x1 stride-2 projection shortcuts where the shape changes. Names carry
// the channels and map sizes (for 1x28x28: stem_1to16_28 ... conv_64to64_7).
std::vector<Layer> resnet20Layers(int64_t c, int64_t h) {
  const int64_t h2 = (h + 1) / 2, h4 = (h2 + 1) / 2;
  const auto at = [](int64_t size) { return std::to_string(size); };
  return {
      {"stem_" + at(c) + "to16_" + at(h), c, h, 16, 3, 1, 1, 1, false},
      {"conv_16to16_" + at(h), 16, h, 16, 3, 1, 1, 6, true},
      {"conv_16to32_s2", 16, h, 32, 3, 2, 1, 1, true},
      {"shortcut_16to32_s2", 16, h, 32, 1, 2, 0, 1, true},
      {"conv_32to32_" + at(h2), 32, h2, 32, 3, 1, 1, 5, true},
      {"conv_32to64_s2", 32, h2, 64, 3, 2, 1, 1, true},
      {"shortcut_32to64_s2", 32, h2, 64, 1, 2, 0, 1, true},
      {"conv_64to64_" + at(h4), 64, h4, 64, 3, 1, 1, 5, true},
  };
}

double processCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wallMs, cpuMs;  // fastest repetition: the least disturbed by other load on the machine
};

template <typename Fn>
Timing fastest(const Fn& fn, double minSeconds, int maxIterations) {
  fn();  // warm-up: workspaces grow, caches fill
  std::vector<double> wall, cpu;
  double spent = 0.0;
  while (static_cast<int>(wall.size()) < maxIterations && (spent < minSeconds || wall.size() < 3)) {
    const double cpuStart = processCpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cpu.push_back((processCpuSeconds() - cpuStart) * 1e3);
    wall.push_back(seconds * 1e3);
    spent += seconds;
  }
  return {*std::min_element(wall.begin(), wall.end()), *std::min_element(cpu.begin(), cpu.end())};
}

// SGEMM: C = A B with 512 x 512 row-major matrices (2 n^3 FLOPs), one independent product
// per thread side by side, as aps's kernels run Eigen (single-threaded GEMMs inside OpenMP
// loops); copy: 64 Mi floats (256 MiB, far beyond the caches) split over the threads, counted
// as 2 x 256 MiB moved, as STREAM counts a copy.
void printPeaks(int threads, double minSeconds, int maxIterations) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Index n = 512;
  std::vector<Matrix> a, b, c;
  for (int t = 0; t < threads; ++t) {
    a.push_back(Matrix::Random(n, n));
    b.push_back(Matrix::Random(n, n));
    c.emplace_back(n, n);
  }
  const Timing gemm = fastest(
      [&] {
        aps::parallelFor(threads, 1, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) c[t].noalias() = a[t] * b[t];
        });
      },
      minSeconds, maxIterations);
  const int64_t values = int64_t{1} << 26;
  std::vector<float> from(static_cast<size_t>(values), 1.0f), to(static_cast<size_t>(values), 0.0f);
  const Timing copy = fastest(
      [&] {
        aps::parallelFor(values, values / threads, [&](int64_t i0, int64_t i1) {
          std::memcpy(to.data() + i0, from.data() + i0, static_cast<size_t>(i1 - i0) * sizeof(float));
        });
      },
      minSeconds, maxIterations);
  const double gflops = 2.0 * static_cast<double>(n * n * n) * threads / gemm.wallMs * 1e-6;
  const double gbs = 2.0 * static_cast<double>(values) * sizeof(float) / copy.wallMs * 1e-6;
  fmt::print("{}\n", nlohmann::json{{"peaks", true},
                                    {"threads", threads},
                                    {"sgemm_gflops", gflops},
                                    {"copy_gbs", gbs},
                                    {"check", static_cast<double>(c[0](0, 0)) + to.back()}}
                         .dump());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times conv2d forward and backward on ResNet-20's layer shapes; prints JSON lines", "aps_bench_ops"};
  int threads = 2;
  int64_t batch = 128;
  double minSeconds = 0.3;
  int maxIterations = 20;
  std::string only, input = "1x28x28";
  bool peaks = false;
  app.add_flag("--peaks", peaks, "print the machine's SGEMM GFLOP/s and stream-copy GB/s instead");
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "images per batch")->check(CLI::PositiveNumber);
  app.add_option("--min-seconds", minSeconds, "minimum time spent timing each pass");
  app.add_option("--max-iterations", maxIterations, "maximum timed repetitions of each pass")
      ->check(CLI::PositiveNumber);
  app.add_option("--input", input, "the network's input shape CxHxW (square maps), default 1x28x28");
  app.add_option("--layer", only, "time only the layer with this name");
  return aps::runTool(app, argc, argv, [&] {
    int64_t c = 0, h = 0, width = 0;
    char x1 = 0, x2 = 0, rest = 0;
    std::istringstream parse(input);
    APS_CHECK((parse >> c >> x1 >> h >> x2 >> width) && !(parse >> rest) && x1 == 'x' && x2 == 'x' && c > 0 && h >= 4 &&
                  h == width,
              "--input '{}' is not CxHxW with square maps of at least 4x4", input);
    const std::vector<Layer> layers = resnet20Layers(c, h);
    APS_CHECK(only.empty() ||
                  std::any_of(layers.begin(), layers.end(), [&](const Layer& layer) { return layer.name == only; }),
              "aps_bench_ops: unknown --layer '{}'", only);
    aps::setNumThreads(threads);
    if (peaks) {
      printPeaks(threads, minSeconds, maxIterations);
      return;
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    double networkMs = 0.0, networkCpuMs = 0.0, networkFlops = 0.0;
    for (const Layer& layer : layers) {
      if (!only.empty() && only != layer.name) continue;
      aps::cpu::Conv2dShape s;
      s.n = batch;
      s.c = layer.c;
      s.h = s.w = layer.h;
      s.k = layer.k;
      s.r = s.s = layer.r;
      s.strideH = s.strideW = layer.stride;
      s.padH = s.padW = layer.pad;
      const int64_t pq = s.outH() * s.outW();
      std::vector<float> in(static_cast<size_t>(s.n * s.c * s.h * s.w)), w(static_cast<size_t>(s.k * s.c * s.r * s.s));
      std::vector<float> out(static_cast<size_t>(s.n * s.k * pq)), gradOut(out.size()), gradIn(in.size()),
          gradW(w.size());
      for (float& v : in) v = normal(rng);
      for (float& v : w) v = normal(rng);
      for (float& v : gradOut) v = normal(rng);
      const double gemmFlops = 2.0 * static_cast<double>(s.n * s.k * pq * s.c * s.r * s.s);
      const Timing forward = fastest([&] { aps::cpu::conv2dForward(out.data(), in.data(), w.data(), nullptr, s); },
                                     minSeconds, maxIterations);
      const Timing backward = fastest(
          [&] {
            aps::cpu::conv2dBackward(layer.needGradIn ? gradIn.data() : nullptr, gradW.data(), nullptr, gradOut.data(),
                                     in.data(), w.data(), s);
          },
          minSeconds, maxIterations);
      const double backwardFlops = gemmFlops * (layer.needGradIn ? 2.0 : 1.0);
      nlohmann::json line = {{"layer", layer.name},
                             {"threads", threads},
                             {"batch", batch},
                             {"count", layer.count},
                             {"forward_ms", forward.wallMs},
                             {"backward_ms", backward.wallMs},
                             {"forward_cpu_ms", forward.cpuMs},
                             {"backward_cpu_ms", backward.cpuMs},
                             {"forward_gflops", gemmFlops / forward.wallMs * 1e-6},
                             {"backward_gflops", backwardFlops / backward.wallMs * 1e-6}};
      fmt::print("{}\n", line.dump());
      networkMs += layer.count * (forward.wallMs + backward.wallMs);
      networkCpuMs += layer.count * (forward.cpuMs + backward.cpuMs);
      networkFlops += layer.count * (gemmFlops + backwardFlops);
    }
    if (only.empty()) {
      nlohmann::json total = {{"layer", "resnet20_convs_total"},
                              {"threads", threads},
                              {"batch", batch},
                              {"ms", networkMs},
                              {"cpu_ms", networkCpuMs},
                              {"gflops", networkFlops / networkMs * 1e-6},
                              {"images_per_s_convs_only", static_cast<double>(batch) / networkMs * 1e3}};
      fmt::print("{}\n", total.dump());
    }
  });
}
