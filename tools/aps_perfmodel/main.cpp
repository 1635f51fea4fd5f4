// aps_perfmodel: an alpha-beta(-gamma) model of every all-reduce algorithm and wire format,
// calibrated from aps_bench_comm JSON lines, predicting communication time and the speedup
// over fp32 for 1..1024 ranks (the APS paper proposes such a model; its exact formula is
// unconfirmed, PAPERS.md section 1, so this one states its terms in PerfModel.h).
#include "framework/core/Error.h"
#include "precision/CodecSpec.h"
#include "tools/aps_perfmodel/PerfModel.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace {

using namespace aps;
using namespace aps::perfmodel;

int64_t parseBytes(const std::string& text) {
  size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    APS_FAIL("--size '{}' is not a number of bytes (e.g. 100M)", text);
  }
  const std::string s = text.substr(used);
  const double scale = s.empty() ? 1.0 : s == "K" ? 1024.0 : s == "M" ? 1048576.0 : s == "G" ? 1073741824.0 : -1.0;
  APS_CHECK(scale > 0.0 && v >= 0.0, "--size '{}': use a byte count with an optional K, M or G", text);
  return static_cast<int64_t>(v * scale);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  APS_CHECK(in.good(), "perfmodel: cannot read calibration file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double bytesPerValue(const std::string& codec) {
  constexpr int64_t kProbe = int64_t{1} << 20;
  return static_cast<double>(precision::makeCodec(codec)->encodedBytes(kProbe)) / static_cast<double>(kProbe);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Predicts all-reduce time and speedup over fp32 for 1..1024 ranks from aps_bench_comm JSON lines",
               "aps_perfmodel"};
  std::vector<std::string> calibration;
  std::string size = "100M";
  std::vector<int> ranks{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  double bandwidthGBps = 0.0, latencyUs = -1.0, computeMs = 0.0;
  std::string baseline = "native", csvPath;
  bool includeSim = false;
  app.add_option("--calibration", calibration, "aps_bench_comm --format json output (repeatable)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--size", size, "fp32 gradient bytes per step (suffix K, M, G)")->capture_default_str();
  app.add_option("--ranks", ranks, "rank counts to predict")->delimiter(',')->capture_default_str();
  app.add_option("--bandwidth-GBps", bandwidthGBps, "target network bandwidth per rank (default: calibrated)");
  app.add_option("--latency-us", latencyUs, "target per-message latency (default: calibrated)");
  app.add_option("--baseline", baseline, "fp32 reference: native or mpi_allreduce")
      ->check(CLI::IsMember({"native", "mpi_allreduce"}))
      ->capture_default_str();
  app.add_option("--compute-ms", computeMs, "compute time per step; adds the step-time speedup (no overlap)");
  app.add_option("--csv", csvPath, "also write the predictions as CSV");
  app.add_flag("--include-sim", includeSim, "calibrate on --sim records too");
  return runTool(app, argc, argv, [&] {
    std::vector<BenchRecord> records;
    for (const std::string& path : calibration) {
      auto r = parseBenchJsonLines(readFile(path), includeSim);
      records.insert(records.end(), r.begin(), r.end());
    }
    std::map<std::string, double> bpv;
    for (const BenchRecord& r : records)
      if (!bpv.count(r.codec)) bpv[r.codec] = bytesPerValue(r.codec);
    AllReducePerfModel model;
    model.fit(records, bpv);
    fmt::print("calibrated on {} records: alpha = {:.2f} us/message, beta = {:.3f} GB/s, median fit error {:.1f}%\n",
               records.size(), model.alpha() * 1e6, model.beta() > 0 ? 1e-9 / model.beta() : 0.0,
               100.0 * model.medianRelativeError());
    for (const auto& [key, g] : model.gamma())
      fmt::print("  gamma {:>18} {:>28}: {:.3f} ns/value\n", key.algorithm, key.codec, g * 1e9);
    if (bandwidthGBps > 0.0 || latencyUs >= 0.0) {
      model.setNetwork(latencyUs >= 0.0 ? latencyUs * 1e-6 : model.alpha(),
                       bandwidthGBps > 0.0 ? 1e-9 / bandwidthGBps : model.beta());
      fmt::print("target network: alpha = {:.2f} us/message, bandwidth = {:.3f} GB/s\n", model.alpha() * 1e6,
                 1e-9 / model.beta());
    }
    const int64_t elements = parseBytes(size) / 4;
    const AllReducePerfModel::Key base{baseline, "fp32"};
    APS_CHECK(model.knows(base), "perfmodel: the calibration has no '{}' fp32 records for the baseline", baseline);

    std::string csv = "ranks,algorithm,codec,bytes_sent_per_rank,time_s,speedup_vs_fp32,step_speedup\n";
    fmt::print("\n{:>6} {:>18} {:>28} {:>16} {:>12} {:>10} {:>10}\n", "ranks", "algorithm", "codec", "sent_per_rank",
               "time_ms", "speedup", "step_spd");
    for (int n : ranks) {
      APS_CHECK(n >= 1, "--ranks: {} is not a rank count", n);
      const double tBase = model.predict(base, n, elements, 4.0);
      for (const auto& [key, g] : model.gamma()) {
        const double b = bpv.at(key.codec);
        const double t = model.predict(key, n, elements, b);
        const double sent = n > 1 ? algorithmCost(key.algorithm, n, elements, b).bytes : 0.0;
        const double speedup = t > 0.0 ? tBase / t : 1.0;
        const double c = computeMs * 1e-3;
        const double step = (c + t) > 0.0 ? (c + tBase) / (c + t) : 1.0;
        fmt::print("{:>6} {:>18} {:>28} {:>16.0f} {:>12.3f} {:>10.2f} {:>10.2f}\n", n, key.algorithm, key.codec, sent,
                   t * 1e3, speedup, step);
        csv +=
            fmt::format("{},{},{},{:.0f},{:.9g},{:.6g},{:.6g}\n", n, key.algorithm, key.codec, sent, t, speedup, step);
      }
    }
    if (!csvPath.empty()) {
      // Write then rename: a reader never sees half a file.
      const std::string tmp = csvPath + ".tmp";
      {
        std::ofstream out(tmp);
        APS_CHECK(out.good(), "perfmodel: cannot write '{}'", tmp);
        out << csv;
      }
      std::filesystem::rename(tmp, csvPath);
      fmt::print("\nwrote {}\n", csvPath);
    }
  });
}
