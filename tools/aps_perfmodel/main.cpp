// aps_perfmodel: a latency-bandwidth model with measured codec work of every all-reduce
// algorithm and wire format, calibrated from aps_bench_comm JSON lines and aps_bench_codec's
// one-core codec rates, predicting communication time and the speedup
// over fp32 for 1..1024 ranks (the APS paper proposes such a model; its exact formula could
// not be confirmed, docs/ALGORITHMS.md, APS performance model, so this one states its terms in
// PerfModel.h). `aps_perfmodel dettmers` computes Dettmers' speedup model (arXiv:1511.04561) from
// his parameters beside this model's prediction for his setting (docs/ALGORITHMS.md).
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
#include <optional>
#include <sstream>
#include <utility>

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

void writeCsv(const std::string& path, const std::string& csv) {
  // Write then rename: a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    APS_CHECK(out.good(), "perfmodel: cannot write '{}'", tmp);
    out << csv;
  }
  std::filesystem::rename(tmp, path);
  fmt::print("\nwrote {}\n", path);
}

struct DettmersOptions {
  std::string kernels = "nervana";
  int gpus = 96;
  std::vector<int64_t> subBatches;
  double bandwidthGBps = 6.0;
  double latencyUs = 6.0;
  double encodeNs = 1.0;
  double decodeNs = 0.5;
  double bucketMb = 25.0;
  std::string csvPath;
};

// Table 7 of arXiv:1511.04561v4 (96 GPUs), printed beside what his formulation computes from
// his Table 6 so that a reader sees both; nothing below is derived from these.
struct PublishedRow {
  int64_t subBatch;
  double nervana32, nervana8, convnet32, convnet8;
};
constexpr PublishedRow kPublishedTable7[] = {{128, 13.4, 13.8, 20.7, 21.4},  {256, 20.0, 24.4, 29.7, 35.2},
                                             {512, 23.0, 39.3, 33.5, 51.9},  {1024, 14.8, 48.6, 22.7, 61.0},
                                             {2048, 11.3, 50.6, 17.7, 62.8}, {12288, 1.3, 9.7, 2.15, 15.5}};

void runDettmers(const DettmersOptions& o) {
  const double total = o.kernels == "convnet2" ? 177.0 : 104.1;
  const bool convnet = o.kernels == "convnet2";
  const double bytes8 = bytesPerValue("dettmers_dynamic");
  fmt::print(
      "Dettmers' speedup model (arXiv:1511.04561v4, appendix 5): AlexNet, {} kernels, T = {} ms per pass on one "
      "GPU\n",
      convnet ? "convnet2" : "NervanaGPU", total);

  // One node of 4 GPUs (5.1).
  const DettmersNode node = dettmersAlexNetNode(total);
  fmt::print(
      "\none node, {} GPUs (5.1): fc {:.2f} ms, split {}-way {:.2f} ms per pass; fc penalty 32-bit {:.2f} ms, "
      "8-bit {:.2f} ms\n",
      node.gpus, node.fcMs, node.gpus, node.parallelFcMs, dettmersFcPenaltyMs(node, 32), dettmersFcPenaltyMs(node, 8));
  fmt::print("  speedup 32-bit {:.2f}x, 8-bit {:.2f}x (paper: {})\n", dettmersNodeSpeedup(node, 32),
             dettmersNodeSpeedup(node, 8), convnet ? "3.71x, 3.8x; Krizhevsky measured 3.66x" : "3.53x, 3.67x");

  // The cluster (5.2).
  const DettmersCluster base = dettmersAlexNetCluster(total, o.gpus);
  DettmersCluster cluster = base;
  cluster.infinibandGBps = o.bandwidthGBps;
  checkDettmersCluster(cluster, 1);
  std::vector<int64_t> subBatches = o.subBatches;
  if (subBatches.empty()) {
    for (int64_t s = 128; s <= 2048 && s <= cluster.globalBatch(); s *= 2) subBatches.push_back(s);
    if (subBatches.empty() || subBatches.back() != cluster.globalBatch()) subBatches.push_back(cluster.globalBatch());
  }
  const bool hisSetting = o.gpus == 96 && o.bandwidthGBps == 6.0;
  const auto tabulated = [&](int64_t s) -> const DettmersTabulatedSync* {
    if (!hisSetting) return nullptr;
    for (const DettmersTabulatedSync& r : dettmersTable6())
      if (r.subBatch == s) return &r;
    return nullptr;
  };
  const auto published = [&](int64_t s) -> const PublishedRow* {
    if (!hisSetting) return nullptr;
    for (const PublishedRow& r : kPublishedTable7)
      if (r.subBatch == s) return &r;
    return nullptr;
  };
  const DettmersLayer& conv = dettmersAlexNetLayers()[3];  // conv3 384->256, the largest conv gradient
  fmt::print("\ncluster (5.2): {} GPUs in {} nodes, batch {} per GPU ({} in all), InfiniBand {} GB/s, PCIe {} GB/s\n",
             cluster.gpus, cluster.nodes(), cluster.batchPerGpu, cluster.globalBatch(), cluster.infinibandGBps,
             cluster.pcieGBps);
  fmt::print(
      "  data-parallel gradient sync of {} ({} values): 32-bit {:.2f} ms, 8-bit {:.2f} ms (paper: about 1.9 ms "
      "32-bit), hidden under its {} ms update\n",
      conv.name, conv.weights, dettmersGradientSyncMs(cluster, conv.weights, 4.0),
      dettmersGradientSyncMs(cluster, conv.weights, bytes8), conv.updateMs);
  fmt::print(
      "  model-parallel activations per pass: s x {} values, one share per node; sync from traffic = 2 PCIe + "
      "{} InfiniBand messages\n\n",
      cluster.activationsPerSample, cluster.nodes() - 1);
  fmt::print("{:>9} {:>7} {:>8} | {:>9} {:>9} {:>7} {:>7} | {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} | {:>7} {:>7}\n",
             "sub_batch", "passes", "fc_ms", "t6sync32", "t6sync8", "t6_x32", "t6_x8", "msg32_KiB", "msg8_KiB",
             "sync32", "sync8", "tr_x32", "tr_x8", "pub_x32", "pub_x8");
  std::string csv =
      "sub_batch,passes,fc_ms,table6_sync32_ms,table6_sync8_ms,table6_speedup32,table6_speedup8,message32_bytes,"
      "message8_bytes,traffic_sync32_ms,traffic_sync8_ms,traffic_speedup32,traffic_speedup8\n";
  auto cell = [](const std::optional<double>& v, int width, int digits) {
    return v ? fmt::format("{:>{}.{}f}", *v, width, digits) : fmt::format("{:>{}}", "-", width);
  };
  double best32 = 0.0, best8 = 0.0, bestT32 = 0.0, bestT8 = 0.0;
  for (int64_t s : subBatches) {
    checkDettmersCluster(cluster, s);
    std::optional<double> t32, t8, ts32, ts8, p32, p8;
    if (const DettmersTabulatedSync* t = tabulated(s)) {
      ts32 = t->ms32;
      ts8 = t->ms8;
      t32 = dettmersClusterStep(cluster, s, t->ms32).speedup;
      t8 = dettmersClusterStep(cluster, s, t->ms8).speedup;
      bestT32 = std::max(bestT32, *t32);
      bestT8 = std::max(bestT8, *t8);
    }
    if (const PublishedRow* p = published(s)) {
      p32 = convnet ? p->convnet32 : p->nervana32;
      p8 = convnet ? p->convnet8 : p->nervana8;
    }
    const double sync32 = dettmersSyncFromTrafficMs(cluster, s, 4.0);
    const double sync8 = dettmersSyncFromTrafficMs(cluster, s, bytes8);
    const DettmersClusterStep a = dettmersClusterStep(cluster, s, sync32);
    const DettmersClusterStep b = dettmersClusterStep(cluster, s, sync8);
    best32 = std::max(best32, a.speedup);
    best8 = std::max(best8, b.speedup);
    fmt::print(
        "{:>9} {:>7.0f} {:>8.1f} | {} {} {} {} | {:>9.1f} {:>9.1f} {:>8.2f} {:>8.2f} {:>7.2f} {:>7.2f} | {} {}\n", s,
        a.passes, a.fcMs, cell(ts32, 9, 2), cell(ts8, 9, 2), cell(t32, 7, 2), cell(t8, 7, 2),
        dettmersActivationMessageBytes(cluster, s, 4.0) / 1024.0,
        dettmersActivationMessageBytes(cluster, s, bytes8) / 1024.0, sync32, sync8, a.speedup, b.speedup,
        cell(p32, 7, 2), cell(p8, 7, 2));
    auto num = [](const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : std::string(); };
    csv += fmt::format("{},{:.6g},{:.6g},{},{},{},{},{:.0f},{:.0f},{:.6g},{:.6g},{:.6g},{:.6g}\n", s, a.passes, a.fcMs,
                       num(ts32), num(ts8), num(t32), num(t8), dettmersActivationMessageBytes(cluster, s, 4.0),
                       dettmersActivationMessageBytes(cluster, s, bytes8), sync32, sync8, a.speedup, b.speedup);
  }
  fmt::print(
      "  t6: his formulation on his Table 6 sync times (8-bit messages 1/8 of 32-bit); tr: on the sync "
      "computed from the traffic (8-bit: {:.3f} bytes per value); pub: his Table 7\n",
      bytes8);

  // aps's model (PerfModel.h) for the same setting: data parallel all the way, every gradient
  // all-reduced in buckets behind backward.
  int64_t weights = 0;
  double fprop = 0.0, listed = 0.0;
  for (const DettmersLayer& l : dettmersAlexNetLayers()) {
    weights += l.weights;
    fprop += l.fpropMs;
    listed += l.fpropMs + l.bpropMs + l.updateMs;
  }
  StepShape shape;
  shape.elements = weights;
  shape.layers = static_cast<int64_t>(dettmersAlexNetLayers().size());
  shape.bucketElements = static_cast<int64_t>(o.bucketMb * 1048576.0 / 4.0);
  shape.forwardSeconds = total * fprop / listed * 1e-3;
  shape.backwardSeconds = total * 1e-3 - shape.forwardSeconds;
  // fp32 sums run at the memory bandwidth of his GTX Titan X (336 GB/s, 12 bytes moved per value:
  // an assumption, the paper gives none); the 8-bit codec at his measured 1 ns to compress and
  // 0.5 ns to decompress a value (3.2), a decode-add as a decode.
  const double fp32Rate = 336e9 / 12.0;
  const double enc = 1e9 / o.encodeNs, dec = 1e9 / o.decodeNs;
  const std::map<std::string, CodecRates> rates{{"fp32", {fp32Rate, fp32Rate, fp32Rate, fp32Rate}},
                                                {"dettmers_dynamic", {enc, dec, dec, 1e9 / (o.encodeNs + o.decodeNs)}}};
  const AllReducePerfModel::Key k32{"native", "fp32"}, k8{"two_shot", "dettmers_dynamic"};
  // The node's GPUs talk over PCIe (his 5 GB/s), the cluster's over InfiniBand.
  const AllReducePerfModel apsNode =
      AllReducePerfModel::stated(o.latencyUs * 1e-6, 1e-9 / cluster.pcieGBps, rates, {k32, k8});
  const AllReducePerfModel apsCluster =
      AllReducePerfModel::stated(o.latencyUs * 1e-6, 1e-9 / o.bandwidthGBps, rates, {k32, k8});
  fmt::print(
      "\naps's model (PerfModel.h), same setting, data parallel throughout: {} gradient values in {} MiB buckets "
      "behind backward ({:.1f} of {} ms), alpha {} us, {} GB/s ({} GB/s in the node), 8-bit codec {} / {} ns "
      "per value\n",
      weights, o.bucketMb, shape.backwardSeconds * 1e3, total, o.latencyUs, o.bandwidthGBps, cluster.pcieGBps,
      o.encodeNs, o.decodeNs);
  fmt::print("{:>6} {:>10} {:>18} {:>10} {:>10} {:>10} {:>9}\n", "ranks", "algorithm", "codec", "comm_ms", "exposed_ms",
             "step_ms", "speedup");
  double aps32 = 0.0, aps8 = 0.0;
  for (int n : {node.gpus, cluster.gpus}) {
    const AllReducePerfModel& aps = n == node.gpus ? apsNode : apsCluster;
    for (const auto& [key, b] : {std::pair{k32, 4.0}, std::pair{k8, bytes8}}) {
      const StepPrediction p = predictStep(aps, key, n, b, shape);
      const double x = dataParallelSpeedup(aps, key, n, b, shape);
      if (n == cluster.gpus) (key.codec == "fp32" ? aps32 : aps8) = x;
      fmt::print("{:>6} {:>10} {:>18} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f}\n", n, key.algorithm, key.codec,
                 p.commSeconds * 1e3, p.exposedSeconds * 1e3, p.stepSeconds * 1e3, x);
    }
  }
  fmt::print(
      "\nat {} GPUs, best over the sub-batches: his formulation on Table 6 {} 32-bit, {} 8-bit; on the "
      "traffic {:.1f}x 32-bit, {:.1f}x 8-bit; aps's model {:.1f}x 32-bit, {:.1f}x 8-bit\n",
      cluster.gpus, bestT32 > 0.0 ? fmt::format("{:.1f}x", bestT32) : std::string("-"),
      bestT8 > 0.0 ? fmt::format("{:.1f}x", bestT8) : std::string("-"), best32, best8, aps32, aps8);
  if (!o.csvPath.empty()) writeCsv(o.csvPath, csv);
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
  app.add_option("--calibration", calibration, "aps_bench_comm --format json output (repeatable; required)")
      ->check(CLI::ExistingFile);
  app.add_option("--codec-rates", codecRatesPath,
                 "aps_bench_codec JSON for the calibrated wire formats (one core, on the machine that ran the ranks; "
                 "required)")
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

  DettmersOptions dettmers;
  auto* dettmersCmd = app.add_subcommand(
      "dettmers",
      "Dettmers' speedup model (arXiv:1511.04561) for AlexNet on one 4-GPU node and an N-GPU cluster at 32 and 8 bits, "
      "from his parameters, beside aps's model for the same setting (no calibration needed)");
  dettmersCmd->add_option("--kernels", dettmers.kernels, "his one-GPU times: nervana (104.1 ms) or convnet2 (177 ms)")
      ->check(CLI::IsMember({"nervana", "convnet2"}))
      ->capture_default_str();
  dettmersCmd->add_option("--gpus", dettmers.gpus, "cluster GPUs, 3 per node as his")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dettmersCmd
      ->add_option("--sub-batches", dettmers.subBatches,
                   "sub-batch sizes of the model-parallel passes (default 128..2048 and the global batch)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  dettmersCmd->add_option("--bandwidth-GBps", dettmers.bandwidthGBps, "InfiniBand bandwidth (his: 6 for FDR)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dettmersCmd
      ->add_option("--latency-us", dettmers.latencyUs,
                   "aps's model: latency per message (default: his smallest InfiniBand latency, Table 5)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  dettmersCmd->add_option("--encode-ns", dettmers.encodeNs, "aps's model: 8-bit compression per value (his: 1)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dettmersCmd->add_option("--decode-ns", dettmers.decodeNs, "aps's model: 8-bit decompression per value (his: 0.5)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dettmersCmd->add_option("--bucket-mb", dettmers.bucketMb, "aps's model: gradient bucket cap in MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  dettmersCmd->add_option("--csv", dettmers.csvPath, "also write the cluster table as CSV");
  // The calibration is required unless a subcommand runs: a usage error (exit 2) like CLI11's own.
  app.parse_complete_callback([&] {
    if (*dettmersCmd) return;
    if (calibration.empty()) throw CLI::RequiredError("--calibration");
    if (codecRatesPath.empty()) throw CLI::RequiredError("--codec-rates");
  });
  return runTool(app, argc, argv, [&] {
    if (*dettmersCmd) {
      runDettmers(dettmers);
      return;
    }
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
    if (!csvPath.empty()) writeCsv(csvPath, csv);
  });
}
