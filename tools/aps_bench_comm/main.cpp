// aps_bench_comm: times the low-precision all-reduce algorithms on the mpi or nccl backend (under
// mpirun) or on N simulated ranks, next to MPI_Allreduce in fp32, and measures their error
// against the exact (fp64) sum. Bandwidths follow nccl-tests: algbw = fp32 bytes / time,
// busbw = algbw * 2(n-1)/n.
#include "comm/AllReduceAlgorithm.h"
#include "comm/MpiCommunicator.h"
#include "comm/NcclCommunicator.h"
#include "comm/SimTransport.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/CodecSpec.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace aps;
using namespace aps::comm;

struct Config {
  std::string size = "4M";
  std::vector<std::string> codecs{"e4m3", "e5m2", "fp16", "bf16", "dettmers_dynamic/block256"};
  std::vector<std::string> algorithms{"two_shot", "ring", "allgather", "native"};
  int iterations = 5;
  int warmup = 1;
  int sim = 0;  // >0: simulate this many ranks in one process instead of using MPI
  std::string backend = "mpi";  // mpi or nccl (buffers on the GPUs)
  std::string device = "cpu";   // --sim: where the simulated ranks' buffers lie
  bool kahan = false;
  bool fp32Sum = false;
  int64_t segmentBytes = comm::kDefaultSegmentBytes;
  uint64_t seed = 1;
  std::string format = "table";
  int failRank = -1;
};

int64_t parseBytes(const std::string& text) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    APS_FAIL("--size '{}' is not a number of bytes (e.g. 4096, 64K, 16M, 1G)", text);
  }
  const std::string suffix = text.substr(used);
  double scale = 1.0;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024.0;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024.0 * 1024.0;
  else
    APS_CHECK(suffix.empty(), "--size '{}': unknown suffix '{}' (K, M or G)", text, suffix);
  APS_CHECK(value >= 0.0, "--size '{}' is negative", text);
  return static_cast<int64_t>(value * scale);
}

// Rank r's input: N(0, 1) values from its own Philox stream, so any process can regenerate it.
std::vector<float> inputOf(int rank, int64_t n, uint64_t seed) {
  Rng rng(seed * 1000003ull + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal();
  return v;
}

// The segment size two_shot and native pipeline with (0 for the other algorithms).
int64_t pipelinedSegmentBytes(const std::string& algorithm, const Config& config) {
  const AllReduceKind kind = parseAllReduceKind(algorithm);
  return kind == AllReduceKind::TwoShot || kind == AllReduceKind::Native ? config.segmentBytes : 0;
}

struct Measurement {
  std::string backend, algorithm, codec;
  int ranks = 1;
  int64_t elements = 0;
  double seconds = 0.0;  // median over iterations of the slowest rank's time
  uint64_t bytesPerRank = 0;
  double relError = 0.0;     // ||result - exact||_2 / ||exact||_2
  double maxRelError = 0.0;  // max_i |result_i - exact_i| / sum_k |x_k,i|
  bool nonFinite = false;
  int64_t segmentBytes = 0;  // two_shot and native: wire bytes per pipelined segment (0: none)
};

void report(const Measurement& m, const std::string& format, bool header) {
  const double bytes = static_cast<double>(m.elements) * 4.0;
  const double algbw = m.seconds > 0.0 ? bytes / m.seconds / 1e9 : 0.0;
  const double busbw = algbw * 2.0 * (m.ranks - 1) / m.ranks;
  if (format == "json") {
    nlohmann::json j{{"bench", "allreduce"},
                     {"backend", m.backend},
                     {"ranks", m.ranks},
                     {"algorithm", m.algorithm},
                     {"codec", m.codec},
                     {"elements", m.elements},
                     {"bytes", m.elements * 4},
                     {"time_s", m.seconds},
                     {"algbw_GBps", algbw},
                     {"busbw_GBps", busbw},
                     {"bytes_sent_per_rank", m.bytesPerRank},
                     {"segment_bytes", m.segmentBytes},
                     {"rel_error", m.relError},
                     {"max_rel_error", m.maxRelError},
                     {"non_finite", m.nonFinite}};
    fmt::print("{}\n", j.dump());
  } else {
    if (header) {
      fmt::print("{:>7} {:>5} {:>22} {:>28} {:>12} {:>11} {:>10} {:>10} {:>14} {:>10} {:>10}\n", "backend", "ranks",
                 "algorithm", "codec", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "sent_per_rank", "rel_err",
                 "max_rel");
    }
    fmt::print("{:>7} {:>5} {:>22} {:>28} {:>12} {:>11.1f} {:>10.3f} {:>10.3f} {:>14} {:>10.2e} {:>10.2e}{}\n",
               m.backend, m.ranks, m.algorithm, m.codec, m.elements * 4, m.seconds * 1e6, algbw, busbw, m.bytesPerRank,
               m.relError, m.maxRelError, m.nonFinite ? "  non-finite!" : "");
  }
  std::fflush(stdout);
}

double median(std::vector<float> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (static_cast<double>(v[h - 1]) + v[h]);
}

struct Reference {
  std::vector<double> exact;   // fp64 sum over ranks
  std::vector<double> absSum;  // sum over ranks of |x|
};

Reference exactSum(int ranks, int64_t n, uint64_t seed) {
  Reference ref{std::vector<double>(static_cast<size_t>(n), 0.0), std::vector<double>(static_cast<size_t>(n), 0.0)};
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> x = inputOf(r, n, seed);
    for (size_t i = 0; i < x.size(); ++i) {
      ref.exact[i] += x[i];
      ref.absSum[i] += std::fabs(x[i]);
    }
  }
  return ref;
}

void fillErrors(Measurement& m, const float* result, const Reference& ref) {
  double err = 0.0, norm = 0.0, worst = 0.0;
  for (size_t i = 0; i < ref.exact.size(); ++i) {
    const double d = static_cast<double>(result[i]) - ref.exact[i];
    err += d * d;
    norm += ref.exact[i] * ref.exact[i];
    if (ref.absSum[i] > 0.0) worst = std::max(worst, std::fabs(d) / ref.absSum[i]);
  }
  m.relError = norm > 0.0 ? std::sqrt(err / norm) : std::sqrt(err);
  m.maxRelError = worst;
}

std::unique_ptr<AllReduceAlgorithm> makeAlgorithm(const std::string& name, const std::string& codec,
                                                  const Config& config, Device device = Device::cpu()) {
  AllReduceOptions options;
  options.kind = parseAllReduceKind(name);
  options.roundEveryAdd = !config.fp32Sum;
  options.kahan = config.kahan;
  options.segmentBytes = config.segmentBytes;
  options.device = device;
  std::shared_ptr<const precision::Codec> c;
  if (options.kind != AllReduceKind::Native) c = precision::makeCodec(codec);
  return makeAllReduce(options, c);
}

// Every (algorithm, codec) pair, native once (it ignores the codec).
std::vector<std::pair<std::string, std::string>> runs(const Config& config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& a : config.algorithms) {
    if (a == "native") {
      out.emplace_back(a, "fp32");
      continue;
    }
    for (const std::string& c : config.codecs) out.emplace_back(a, c);
  }
  return out;
}

// Under mpirun: the mpi backend on host buffers, or nccl on each rank's GPU (the buffers, the
// schedules' scratch and their codecs on the device; each timing ends once the device is done).
void benchMpi(const Config& config, int64_t n) {
  MpiCommunicator comm;
  abortJobOnError(comm, [&] {
    if (config.failRank == comm.rank()) APS_FAIL("--fail-rank {}: failing on purpose", config.failRank);
    const std::unique_ptr<Communicator> nccl = config.backend == "nccl" ? makeNcclCommunicator(comm) : nullptr;
    Communicator& wire = nccl ? *nccl : comm;
    const int ranks = comm.size();
    const std::vector<float> input = inputOf(comm.rank(), n, config.seed);
    const Reference ref = comm.rank() == 0 ? exactSum(ranks, n, config.seed) : Reference{};
    std::vector<float> data(input.size());
    std::unique_ptr<cuda::DeviceScratch> onDevice;
    float* buffer = data.data();  // what the all-reduces reduce
    if (nccl) {
      onDevice = std::make_unique<cuda::DeviceScratch>(data.size() * sizeof(float), cuda::currentDevice());
      buffer = static_cast<float*>(onDevice->data());
    }
    bool header = true;

    auto measure = [&](const std::string& algorithm, const std::string& codec, auto&& once) {
      Measurement m{config.backend, algorithm, codec, ranks, n};
      std::vector<float> times;
      for (int it = -config.warmup; it < config.iterations; ++it) {
        std::copy(input.begin(), input.end(), data.begin());
        if (nccl) cuda::copySync(buffer, data.data(), data.size() * sizeof(float), cuda::CopyKind::HostToDevice);
        comm.barrier();
        const auto start = std::chrono::steady_clock::now();
        once(m);
        if (nccl) cuda::synchronize(cuda::currentDevice());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (it >= 0) times.push_back(static_cast<float>(s));
      }
      if (nccl) cuda::copySync(data.data(), buffer, data.size() * sizeof(float), cuda::CopyKind::DeviceToHost);
      // Per iteration the slowest rank counts; the median over iterations resists the noise
      // of shared, oversubscribed machines.
      comm.allReduce(times.data(), static_cast<int64_t>(times.size()), ReduceOp::Max);
      m.seconds = median(times);
      if (comm.rank() == 0) {
        fillErrors(m, data.data(), ref);
        report(m, config.format, header);
        header = false;
      }
    };

    // The baseline: MPI_Allreduce or ncclAllReduce in fp32 (the library's order).
    measure(nccl ? "nccl_allreduce" : "mpi_allreduce", "fp32", [&](Measurement& m) {
      wire.allReduce(buffer, n, ReduceOp::Sum);
      m.bytesPerRank = 0;  // unknown: depends on the library's algorithm
    });
    for (const auto& [algorithm, codec] : runs(config)) {
      const auto reducer =
          makeAlgorithm(algorithm, codec, config, nccl ? Device::cuda(cuda::currentDevice()) : Device::cpu());
      // A structured binding cannot be captured before clang 16: the segment size outside.
      const int64_t segmentBytes = pipelinedSegmentBytes(algorithm, config);
      measure(reducer->name(), codec, [&](Measurement& m) {
        m.segmentBytes = segmentBytes;
        const SyncStats stats =
            reducer->run(wire, std::vector<float*>{buffer}, n, {config.seed, static_cast<uint64_t>(m.elements), 0});
        m.bytesPerRank = stats.bytesSent.at(0);
        m.nonFinite = stats.nonFinite;
      });
    }
  });
}

// N simulated ranks in this process; with --device cuda their buffers, the schedules and the
// codecs on the GPU (each timing ends once the device is done).
void benchSim(const Config& config, int64_t n) {
  const int ranks = config.sim;
  const Device device = parseDevice(config.device);
  if (device.isCuda()) cuda::setDevice(device.index);
  SimTransport sim(ranks, device);
  const Reference ref = exactSum(ranks, n, config.seed);
  std::vector<std::vector<float>> inputs, data;
  for (int r = 0; r < ranks; ++r) inputs.push_back(inputOf(r, n, config.seed));
  data = inputs;
  std::vector<std::unique_ptr<cuda::DeviceScratch>> onDevice;
  std::vector<float*> pointers;
  for (auto& d : data) {
    if (device.isCuda()) {
      onDevice.push_back(std::make_unique<cuda::DeviceScratch>(d.size() * sizeof(float), device.index));
      pointers.push_back(static_cast<float*>(onDevice.back()->data()));
    } else {
      pointers.push_back(d.data());
    }
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  bool header = true;
  for (const auto& [algorithm, codec] : runs(config)) {
    const auto reducer = makeAlgorithm(algorithm, codec, config, device);
    Measurement m{device.isCuda() ? "sim:" + deviceName(device) : "sim", reducer->name(), codec, ranks, n};
    m.segmentBytes = pipelinedSegmentBytes(algorithm, config);
    std::vector<float> times;
    for (int it = -config.warmup; it < config.iterations; ++it) {
      for (size_t r = 0; r < data.size(); ++r) {
        std::copy(inputs[r].begin(), inputs[r].end(), data[r].begin());
        if (device.isCuda()) cuda::copySync(pointers[r], data[r].data(), bytes, cuda::CopyKind::HostToDevice);
      }
      const auto start = std::chrono::steady_clock::now();
      const SyncStats stats = reducer->run(sim, pointers, n, {config.seed, static_cast<uint64_t>(n), 0});
      if (device.isCuda()) cuda::synchronize(device.index);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (it >= 0) times.push_back(static_cast<float>(s));
      m.bytesPerRank = stats.maxBytesSent();
      m.nonFinite = stats.nonFinite;
    }
    m.seconds = median(times);
    if (device.isCuda()) cuda::copySync(data[0].data(), pointers[0], bytes, cuda::CopyKind::DeviceToHost);
    fillErrors(m, data[0].data(), ref);
    report(m, config.format, header);
    header = false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "All-reduce benchmark: time, bandwidth, bytes on the wire and error of each algorithm and wire "
      "format, with MPI_Allreduce fp32 alongside. Run under mpirun, or with --sim N.",
      "aps_bench_comm"};
  Config config;
  app.add_option("--size", config.size, "fp32 payload per rank in bytes (suffix K, M, G)")->capture_default_str();
  app.add_option("--codecs", config.codecs, "wire formats (precision codec specs)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--algorithms", config.algorithms, "ring, two_shot, allgather, native")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--iterations", config.iterations, "timed all-reduces per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", config.warmup, "untimed all-reduces first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--sim", config.sim, "simulate this many ranks in one process instead of MPI")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--backend", config.backend,
                 "under mpirun: mpi (host buffers) or nccl (one GPU per rank, the schedules over device buffers)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  app.add_option("--device", config.device, "with --sim: cpu, or cuda[:N] for the simulated ranks' buffers on a GPU")
      ->capture_default_str();
  app.add_flag("--kahan", config.kahan, "allgather: Kahan-compensated sum in the wire format");
  app.add_flag("--fp32-sum", config.fp32Sum, "allgather: sum in fp32 instead of rounding after every add");
  app.add_option("--segment-bytes", config.segmentBytes,
                 "two_shot and native: wire bytes per pipelined segment of a chunk (0: no pipelining)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", config.seed, "input seed")->capture_default_str();
  app.add_option("--format", config.format, "table or json (JSON lines)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--fail-rank", config.failRank, "make this rank fail (tests that the job aborts, not hangs)");
  return runTool(app, argc, argv, [&] {
    const int64_t n = parseBytes(config.size) / 4;
    APS_CHECK(!(config.kahan && config.fp32Sum), "--kahan and --fp32-sum exclude each other");
    APS_CHECK(config.sim == 0 || config.backend == "mpi", "--sim {}: --backend {} does not apply (use --device)",
              config.sim, config.backend);
    APS_CHECK(config.sim > 0 || config.device == "cpu",
              "--device {} applies to --sim; under mpirun use --backend nccl for the GPUs", config.device);
    if (config.sim > 0) {
      benchSim(config, n);
    } else {
      benchMpi(config, n);
    }
  });
}
