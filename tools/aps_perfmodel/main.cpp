// aps_perfmodel: a latency-bandwidth model with measured codec work of every all-reduce
// algorithm and wire format, calibrated from aps_bench_comm JSON lines and aps_bench_codec's
// one-core codec rates, predicting communication time and the speedup
// over fp32 for 1..1024 ranks (the APS paper proposes such a model; its exact formula could
// not be confirmed, docs/ALGORITHMS.md, APS performance model, so this one states its terms in
// PerfModel.h).
#include "framework/core/Error.h"
#include "models/ModelRegistry.h"
#include "precision/CodecSpec.h"
#include "tools/aps_perfmodel/PerfModel.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#include <algorithm>
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
  APS_CHECK(in.good(), "perfmodel: cannot read '{}'", path);
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
  std::string codecRatesPath;
  std::string size = "100M";
  std::vector<int> ranks{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  double codecSlowdown = 1.0, targetCodecSlowdown = 0.0, targetEfficiency = -1.0;
  double bandwidthGBps = 0.0, latencyUs = -1.0, forwardMs = 0.0, backwardMs = 0.0, bucketMb = 25.0;
  std::string baseline = "native", csvPath, modelName;
  std::vector<std::string> validate;
  bool includeSim = false, aps = false;
  app.add_option("--calibration", calibration, "aps_bench_comm --format json output (repeatable)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--codec-rates", codecRatesPath,
                 "aps_bench_codec JSON for the calibrated wire formats (one core, on the machine that ran the ranks)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--codec-slowdown", codecSlowdown,
                 "how many times slower a calibration rank ran codec work than aps_bench_codec's one core (the "
                 "ranks per core when ranks shared cores)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--target-codec-slowdown", targetCodecSlowdown,
                 "the codec slowdown of the cluster to predict (default: the calibration's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--target-overlap-efficiency", targetEfficiency,
                 "how much of the smaller of wire and codec time the pipeline hides on the cluster to predict, 0 "
                 "to 1 (default: the calibration's fit; 1 where codec work has cores of its own)")
      ->check(CLI::Range(0.0, 1.0));
  TimingNoise noise;
  double resolutionMs = 0.0;
  app.add_option("--time-resolution-ms", resolutionMs,
                 "how well a calibration time near 0 is known, q in the fit's weights sqrt(q^2 + (c t)^2) "
                 "(default: the fastest calibration record's time)")
      ->check(CLI::PositiveNumber);
  app.add_option("--relative-noise", noise.relative,
                 "how well a long calibration time is known, relative: c in the fit's weights")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--size", size, "fp32 gradient bytes per step (suffix K, M, G)")->capture_default_str();
  app.add_option("--ranks", ranks, "rank counts to predict")->delimiter(',')->capture_default_str();
  app.add_option("--bandwidth-GBps", bandwidthGBps, "target network bandwidth per rank (default: calibrated)");
  app.add_option("--latency-us", latencyUs, "target per-message latency (default: calibrated)");
  app.add_option("--baseline", baseline, "fp32 reference: native or mpi_allreduce")
      ->check(CLI::IsMember({"native", "mpi_allreduce"}))
      ->capture_default_str();
  app.add_option("--model", modelName, "take the gradient size and layer count of this model (overrides --size)");
  app.add_option("--forward-ms", forwardMs, "forward time per step and rank (for the step time)");
  app.add_option("--backward-ms", backwardMs, "backward time per step and rank; bucket all-reduces overlap it");
  app.add_option("--bucket-mb", bucketMb, "gradient bucket cap in MiB (comm.bucket_mb)")->capture_default_str();
  app.add_flag("--aps", aps, "add APS's per-layer exponent agreement (one small all-reduce per bucket)");
  app.add_option("--validate", validate,
                 "aps_bench_comm JSON measured on the target cluster: print predicted vs measured time")
      ->check(CLI::ExistingFile);
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
    noise.resolutionSeconds = resolutionMs * 1e-3;
    model.fit(records, bpv, parseCodecBench(readFile(codecRatesPath)), codecSlowdown, noise);
    fmt::print(
        "calibrated on {} records: alpha = {:.2f} us/message, bandwidth = {:.3f} GB/s, codec work "
        "x{:.2f} of one core's aps_bench_codec time (given), pipeline overlap efficiency {:.2f}, median fit "
        "error {:.1f}% (weights: time resolution {:.2f} ms, relative noise {:.3f})\n",
        records.size(), model.alpha() * 1e6, model.beta() > 0 ? 1e-9 / model.beta() : 0.0, model.kappa(),
        model.overlapEfficiency(), 100.0 * model.medianRelativeError(), model.timeResolution() * 1e3, noise.relative);
    if (model.mpiBeta() > 0.0)
      fmt::print("  MPI_Allreduce: alpha = {:.2f} us/message, bandwidth = {:.3f} GB/s\n", model.mpiAlpha() * 1e6,
                 1e-9 / model.mpiBeta());
    if (bandwidthGBps > 0.0 || latencyUs >= 0.0) {
      model.setNetwork(latencyUs >= 0.0 ? latencyUs * 1e-6 : model.alpha(),
                       bandwidthGBps > 0.0 ? 1e-9 / bandwidthGBps : model.beta());
      fmt::print("target network: alpha = {:.2f} us/message, bandwidth = {:.3f} GB/s\n", model.alpha() * 1e6,
                 1e-9 / model.beta());
    }
    if (targetCodecSlowdown > 0.0) {
      model.setCodecSlowdown(targetCodecSlowdown);
      fmt::print("target codec work: x{:.2f} of one core's aps_bench_codec time\n", model.kappa());
    }
    if (targetEfficiency >= 0.0) {
      model.setOverlapEfficiency(targetEfficiency);
      fmt::print("target pipeline overlap efficiency: {:.2f}\n", model.overlapEfficiency());
    }
    int64_t elements = parseBytes(size) / 4, layers = 1;
    if (!modelName.empty()) {
      const auto params = models::createModel(modelName)->namedParameters();
      elements = 0;
      for (const auto& p : params) elements += p.tensor.numel();
      layers = static_cast<int64_t>(params.size());
      fmt::print("model {}: {} gradient values in {} tensors\n", modelName, elements, layers);
    }
    if (!validate.empty()) {
      fmt::print("\n{:>6} {:>28} {:>12} {:>12} {:>12} {:>8}\n", "ranks", "algorithm", "values", "measured_ms",
                 "predicted_ms", "error");
      std::vector<double> errors;
      for (const std::string& path : validate) {
        for (const BenchRecord& r : parseBenchJsonLines(readFile(path), includeSim)) {
          const AllReducePerfModel::Key key{algorithmFamily(r.algorithm), r.codec};
          if (!model.knows(key)) continue;
          if (!bpv.count(r.codec)) bpv[r.codec] = bytesPerValue(r.codec);
          const double t = model.predict(key, r.ranks, r.elements, bpv.at(r.codec), r.segmentBytes);
          const double e = (t - r.seconds) / r.seconds;
          errors.push_back(std::fabs(e));
          fmt::print("{:>6} {:>28} {:>12} {:>12.2f} {:>12.2f} {:>+7.1f}%\n", r.ranks, r.algorithm, r.elements,
                     r.seconds * 1e3, t * 1e3, 100.0 * e);
        }
      }
      APS_CHECK(!errors.empty(), "perfmodel: no record of the --validate files matches a calibrated algorithm");
      std::sort(errors.begin(), errors.end());
      fmt::print("validation: {} records, median |error| {:.1f}%, max {:.1f}%\n", errors.size(),
                 100.0 * errors[errors.size() / 2], 100.0 * errors.back());
    }
    StepShape shape;
    shape.elements = elements;
    shape.layers = layers;
    shape.bucketElements = static_cast<int64_t>(bucketMb * 1048576.0 / 4.0);
    shape.forwardSeconds = forwardMs * 1e-3;
    shape.backwardSeconds = backwardMs * 1e-3;
    const AllReducePerfModel::Key base{baseline, "fp32"};
    APS_CHECK(model.knows(base), "perfmodel: the calibration has no '{}' fp32 records for the baseline", baseline);

    std::string csv =
        "ranks,algorithm,codec,bytes_sent_per_rank,comm_s,exposed_s,step_s,comm_speedup_vs_fp32,step_speedup\n";
    fmt::print("\n{:>6} {:>18} {:>28} {:>16} {:>10} {:>10} {:>10} {:>8} {:>8}\n", "ranks", "algorithm", "codec",
               "sent_per_rank", "comm_ms", "exposed_ms", "step_ms", "comm_x", "step_x");
    for (int n : ranks) {
      APS_CHECK(n >= 1, "--ranks: {} is not a rank count", n);
      StepShape fp32Shape = shape;
      fp32Shape.aps = false;  // fp32 needs no scaling
      const StepPrediction pBase = predictStep(model, base, n, 4.0, fp32Shape);
      for (const AllReducePerfModel::Key& key : model.keys()) {
        const double b = bpv.at(key.codec);
        StepShape mine = shape;
        mine.aps = aps && key.codec != "fp32";
        const StepPrediction p = predictStep(model, key, n, b, mine);
        const double sent = n > 1 ? algorithmCost(key.algorithm, n, elements, b).bytes : 0.0;
        const double speedup = p.commSeconds > 0.0 ? pBase.commSeconds / p.commSeconds : 1.0;
        const double step = p.stepSeconds > 0.0 ? pBase.stepSeconds / p.stepSeconds : 1.0;
        fmt::print("{:>6} {:>18} {:>28} {:>16.0f} {:>10.3f} {:>10.3f} {:>10.3f} {:>8.2f} {:>8.2f}\n", n, key.algorithm,
                   key.codec, sent, p.commSeconds * 1e3, p.exposedSeconds * 1e3, p.stepSeconds * 1e3, speedup, step);
        csv += fmt::format("{},{},{},{:.0f},{:.9g},{:.9g},{:.9g},{:.6g},{:.6g}\n", n, key.algorithm, key.codec, sent,
                           p.commSeconds, p.exposedSeconds, p.stepSeconds, speedup, step);
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
