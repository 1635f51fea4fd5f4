// aps_bench_train: training-step throughput on random data, for comparison with PyTorch
// (torch_bench.py, compare.sh). One step = forward, mean cross-entropy, backward, SGD
// (momentum 0.9) update, as in a real training loop. Prints one JSON line. --compute runs
// the step in a 16-bit compute precision (autograd/ComputePrecision.h) with loss scaling.
// --profile then runs the steps again with the engine's per-op profile on (framework/core/
// Profile.h) and adds where a step's time goes, op by op, to the line (tools/perf/breakdown.py
// turns it into docs/PERFORMANCE.md).
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/core/Rng.h"
#include "framework/ops/Loss.h"
#include "framework/optim/Sgd.h"
#include "framework/tensor/CpuAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "models/ModelRegistry.h"
#include "precision/DynamicLossScaler.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace {

// "3x32x32" -> {3, 32, 32}.
std::vector<int64_t> parseImageShape(const std::string& text) {
  std::vector<int64_t> dims;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('x', start), text.size());
    const std::string part = text.substr(start, end - start);
    APS_CHECK(!part.empty() && part.find_first_not_of("0123456789") == std::string::npos,
              "--input: expected CxHxW such as 3x32x32, got '{}'", text);
    dims.push_back(std::stoll(part));
    start = end + 1;
  }
  APS_CHECK(dims.size() == 3 && dims[0] > 0 && dims[1] > 0 && dims[2] > 0,
            "--input: expected CxHxW such as 3x32x32, got '{}'", text);
  return dims;
}

// User + system CPU seconds of this process: on a shared machine, less noisy than wall time.
double cpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double peakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measures training steps per second of a registry model on random data; prints one JSON line",
               "aps_bench_train"};
  std::string name = "resnet20", input = "3x32x32", compute = "fp32", deviceName = "cpu";
  int64_t batch = 128, numClasses = 0;
  int threads = 1, steps = 20, warmup = 2;
  bool profile = false;
  app.add_option("--model", name, "model name (aps_model --list)");
  app.add_option("--input", input, "image shape CxHxW");
  app.add_option("--batch", batch, "images per step")->check(CLI::PositiveNumber);
  app.add_option("--num-classes", numClasses, "classes (default: the model's)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (buffers, caches)")->check(CLI::NonNegativeNumber);
  app.add_option("--compute", compute, "precision.compute: fp32, fp16_mixed, fp16_pure, bf16_mixed, bf16_pure");
  app.add_option("--device", deviceName,
                 "cpu, or cuda[:N] (the aps_bench_train_cuda build, which links the CUDA kernels)");
  app.add_flag("--profile", profile,
               "then as many steps again with the per-op profile, added to the line as 'profile'");
  return aps::runTool(app, argc, argv, [&] {
    const auto precision = aps::autograd::ComputePrecision::parse(compute);
    const aps::Device device = aps::parseDevice(deviceName);
    if (device.isCuda()) {
      aps::cuda::requireDevice(device.index, "--device " + deviceName);
      aps::cuda::setDevice(device.index);
    }
    const std::vector<int64_t> image = parseImageShape(input);
    aps::setNumThreads(threads);
    const aps::models::ModelInfo& info = aps::models::modelInfo(name);
    auto model = aps::models::createModel(name, {.numClasses = numClasses, .inChannels = image[0], .seed = 1});
    model->to(device);
    const int64_t classes = numClasses > 0 ? numClasses : info.defaultNumClasses;
    const aps::NamedTensors params = model->namedParameters();
    aps::optim::Sgd sgd(params, {.lr = 0.01, .momentum = 0.9, .weightDecay = 5e-4});
    if (precision.isPure()) sgd.setStorageFormat(precision.format());
    aps::precision::DynamicLossScaler scaler;

    aps::Rng rng(7);
    const aps::Tensor x = aps::Tensor::randn({batch, image[0], image[1], image[2]}, rng).to(device);
    std::vector<int64_t> labels(static_cast<size_t>(info.segmentation ? batch * image[1] * image[2] : batch));
    for (auto& label : labels) label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(classes)));
    const aps::Tensor y = (info.segmentation ? aps::Tensor::fromVector(labels, {batch, image[1], image[2]})
                                             : aps::Tensor::fromVector(labels, {batch}))
                              .to(device);

    model->train();
    float loss = 0.0f;
    auto step = [&] {
      sgd.zeroGrad();
      aps::Tensor l;
      {
        aps::autograd::ComputePrecisionGuard guard(precision);
        l = aps::ops::crossEntropy(model->forward(x), y);
      }
      if (precision.isFp32()) {
        aps::autograd::backward(l);
        sgd.step();
      } else {
        aps::autograd::backward(l, scaler.rootGradient());
        if (scaler.update(scaler.unscaleGradients(params, precision.parameterFormat()))) sgd.step();
      }
      loss = l.item();
    };
    for (int i = 0; i < warmup; ++i) step();
    const uint64_t freshBefore = aps::CpuAllocator::instance().freshAllocations();
    const double cpuStart = cpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = cpuSeconds() - cpuStart;
    const uint64_t fresh = aps::CpuAllocator::instance().freshAllocations() - freshBefore;
    nlohmann::json line = {{"tool", "aps_bench_train"},
                           {"model", name},
                           {"compute", precision.name()},
                           {"device", aps::deviceName(device)},
                           {"input", input},
                           {"batch", batch},
                           {"threads", threads},
                           {"steps", steps},
                           {"step_ms", 1e3 * seconds / steps},
                           {"images_per_s", static_cast<double>(batch) * steps / seconds},
                           {"cpu_ms_per_step", 1e3 * cpu / steps},
                           {"peak_rss_mib", peakRssMiB()},
                           // tensor blocks from the C allocator rather than a cache (0 once warm)
                           {"fresh_allocations_per_step", static_cast<double>(fresh) / steps},
                           {"last_loss", loss}};
    if (profile) {
      // A separate pass, so that the timing above is free of the profile's clock reads.
      aps::profile::reset();
      aps::profile::setEnabled(true);
      const auto profileStart = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      const double profiled = std::chrono::duration<double>(std::chrono::steady_clock::now() - profileStart).count();
      aps::profile::setEnabled(false);
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [op, t] : aps::profile::totals()) {
        ops[op] = {{"ms_per_step", 1e3 * t.seconds / steps},
                   {"calls_per_step", static_cast<double>(t.calls) / steps},
                   {"gflop_per_step", 1e-9 * t.flops / steps},
                   {"gb_per_step", 1e-9 * t.bytes / steps}};
      }
      line["profile"] = {{"step_ms", 1e3 * profiled / steps}, {"ops", ops}};
    }
    fmt::print("{}\n", line.dump());
  });
}
