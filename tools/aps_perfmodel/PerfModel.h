#pragma once

#include <Eigen/Dense>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aps::perfmodel {

// One all-reduce measurement (a line of aps_bench_comm --format json).
struct BenchRecord {
  std::string algorithm;  // "two_shot/e4m3", "native/fp32", "mpi_allreduce", ...
  std::string codec;      // "e4m3", "fp32", ...
  int ranks = 1;
  int64_t elements = 0;
  double seconds = 0.0;
  uint64_t bytesSentPerRank = 0;  // 0 when unknown (mpi_allreduce)
  int64_t segmentBytes = 0;       // two_shot and native: wire bytes per pipelined segment (0: none)
};

// Parses aps_bench_comm JSON lines; lines with another "bench" or backend "sim" are skipped
// unless includeSim. Throws aps::Error naming the line on malformed input.
std::vector<BenchRecord> parseBenchJsonLines(const std::string& text, bool includeSim = false);

// min ||A x - b|| subject to x >= 0 (Lawson-Hanson), used by AllReducePerfModel::fit.
Eigen::VectorXd nonNegativeLeastSquares(const Eigen::MatrixXd& a, const Eigen::VectorXd& b);

// One core's speed of a codec's four operations in values per second: a line of
// `aps_bench_codec` output (measured apart from the network, on the machine that runs the ranks).
struct CodecRates {
  double encode = 0.0;
  double decode = 0.0;
  double decodeAdd = 0.0;
  double decodeAddEncode = 0.0;
};

// Parses aps_bench_codec's JSON report (--codecs ...): codec name -> rates. Throws aps::Error
// naming the field when a rate is missing or not positive.
std::map<std::string, CodecRates> parseCodecBench(const std::string& text);

// The shape of an algorithm at N ranks for n fp32 values, per rank: messages it sends one after
// another (latency terms), bytes it sends, the values each codec operation touches, and the
// pipeline segments its codec work is spread over (two_shot and native, comm/TwoShotAllReduce).
struct AlgorithmCost {
  double messages = 0.0;
  double bytes = 0.0;
  double segments = 1.0;
  double encodeValues = 0.0;
  double decodeValues = 0.0;
  double decodeAddValues = 0.0;
  double decodeAddEncodeValues = 0.0;
  // Seconds of codec work on one core at `rates`.
  double codecSeconds(const CodecRates& rates) const;
};

// The family of an algorithm name: the part before '/' ("allgather_rounded/e4m3" ->
// "allgather_rounded"). Known: ring, two_shot, allgather_*, native, mpi_allreduce.
std::string algorithmFamily(const std::string& algorithm);

// Cost terms for `family` with a codec of `bytesPerValue` (e.g. 1 for e4m3, 4 for fp32) and
// two_shot's segment size (0: not pipelined). Includes the one-byte-per-rank non-finite flag
// round of comm's algorithms.
AlgorithmCost algorithmCost(const std::string& family, int ranks, int64_t elements, double bytesPerValue,
                            int64_t segmentBytes = 0);

// Time on the wire and codec time combined: added up without a pipeline (S = 1); with S
// segments the smaller of the two hides behind the larger except for one segment's worth (the
// pipeline's fill and drain), at full efficiency e = 1: wire + codec - e min(wire, codec) (1 - 1/S).
double overlapped(double wireSeconds, double codecSeconds, double segments, double efficiency = 1.0);

// How well a measured all-reduce time t is known: sigma(t) = sqrt(q^2 + (c t)^2). q is the
// time resolution of the calibration: its exchanges complete in whole units of roughly q (on an
// emulated cluster whose ranks outnumber the cores, the scheduler's slices; on a real network,
// its latency and the timer), so a time near q is known to about q, not to a few percent. c is
// the relative drift of long transfers between runs (the machine's and the network's load). The
// fit minimises the sum of squared (predicted - measured) / sigma: relative error for the large
// records, absolute error in units of q for the small ones. Relative error for all (q = 0) let
// the calibration's smallest records, which a latency-bandwidth line cannot follow when their
// times come in whole slices, pull the bandwidth away from what the large records measure.
struct TimingNoise {
  double resolutionSeconds = 0.0;  // q; 0: the fastest calibration record's time
  double relative = 0.05;          // c
};

// A physical latency-bandwidth model with measured codec work:
//   T(alg, codec, N, n) = alpha * messages + overlapped(beta * bytes, kappa * codecSeconds, S, e)
// alpha (s per message) and beta (s per byte) are the network's, shared by aps's algorithms
// (one network, one transport: comm's exchange rounds), and fitted. A pipelined two_shot sends
// 2 S + 1 rounds instead of 3 and overlaps its codec work with them (overlapped()). The codec work is not
// fitted: it is each operation's value count over that codec's one-core rate measured apart by
// aps_bench_codec, times the codec slowdown kappa, a given: how many times slower a rank runs
// codec work than one dedicated core (1 with a core per rank; the ranks per core when ranks
// share cores, as on an emulated cluster on one machine). MPI_Allreduce is a black box (the MPI
// library picks its algorithm, segmenting and protocol per size), so it gets its own alpha and
// beta, measured on the same network. alpha and beta are fitted by non-negative least squares,
// each record weighted by how well its time is known (TimingNoise); fit() refuses calibrations
// that cannot pin them down (sizes too alike for latency and bandwidth to be told apart). The
// overlap efficiency e (0 to 1) is fitted too, by a search over it: 1 where the codec work runs
// on cores of its own, less where it shares them with the network stack.
class AllReducePerfModel {
 public:
  struct Key {
    std::string algorithm;  // family, e.g. "two_shot"
    std::string codec;
    auto operator<=>(const Key&) const = default;
  };

  // bytesPerValue(codec) must be known for every record's codec, and rates(codec) for every
  // codec of a record that is not MPI_Allreduce; codecSlowdown is kappa (> 0).
  void fit(const std::vector<BenchRecord>& records, const std::map<std::string, double>& bytesPerValue,
           const std::map<std::string, CodecRates>& rates, double codecSlowdown = 1.0, TimingNoise noise = {});

  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  double kappa() const { return kappa_; }
  double overlapEfficiency() const { return efficiency_; }
  double mpiAlpha() const { return mpiAlpha_; }
  double mpiBeta() const { return mpiBeta_; }
  // The time resolution q the fit weighted by (TimingNoise; the fastest record's time by default).
  double timeResolution() const { return resolution_; }
  // A target network: aps's alpha and beta become these, MPI_Allreduce's scale alike.
  void setNetwork(double alpha, double beta) {
    if (alpha_ > 0.0) mpiAlpha_ *= alpha / alpha_;
    if (beta_ > 0.0) mpiBeta_ *= beta / beta_;
    alpha_ = alpha;
    beta_ = beta;
  }
  // A target machine's codec slowdown (e.g. 1 where each rank has a core of its own).
  void setCodecSlowdown(double kappa) { kappa_ = kappa; }
  // A target machine's overlap efficiency (e.g. 1 where codec work does not share the cores
  // that drive the network).
  void setOverlapEfficiency(double efficiency) { efficiency_ = efficiency; }
  // The (algorithm, codec) pairs seen in the calibration, which predict() accepts.
  const std::vector<Key>& keys() const { return keys_; }
  bool knows(const Key& key) const;

  // segmentBytes: two_shot's pipeline segment (comm's default 1 MiB; 0: not pipelined).
  double predict(const Key& key, int ranks, int64_t elements, double bytesPerValue,
                 int64_t segmentBytes = kPipelineSegmentBytes) const;
  static constexpr int64_t kPipelineSegmentBytes = int64_t{1} << 20;
  // Median |predicted - measured| / measured over the records it was fitted on.
  double medianRelativeError() const { return medianRelativeError_; }

 private:
  double alpha_ = 0.0;
  double beta_ = 0.0;
  double kappa_ = 1.0;
  double efficiency_ = 1.0;
  double mpiAlpha_ = 0.0;
  double mpiBeta_ = 0.0;
  double resolution_ = 0.0;
  std::vector<Key> keys_;
  std::map<std::string, CodecRates> rates_;
  double medianRelativeError_ = 0.0;
};

// One training step of data-parallel SGD with bucketed, overlapped gradient all-reduce
// (comm/GradientReducer): the gradient is split into buckets (the last one reduced, holding
// the first layers, only starts when backward ends), each reduced on the communication thread
// while backward goes on. APS adds one small all-reduce per bucket (an all-gather of one fp32
// exponent per layer: N-1 messages, (N-1) * 4 * layers bytes).
struct StepShape {
  int64_t elements = 0;          // gradient values
  int64_t layers = 0;            // parameter tensors (APS exponents)
  int64_t bucketElements = 0;    // values per bucket (cap); 0: one bucket
  double forwardSeconds = 0.0;   // per step, per rank
  double backwardSeconds = 0.0;  // per step, per rank
  bool aps = false;
};

struct StepPrediction {
  double commSeconds = 0.0;     // all buckets, plus APS's agreements
  double exposedSeconds = 0.0;  // not hidden behind backward
  double stepSeconds = 0.0;     // forward + backward + exposed
};

// Overlap: bucket k's all-reduce can start once backward has produced it; with the
// communication thread busy back to back, what stays exposed is at least the last bucket's
// time and at least the total minus the backward time it can hide behind.
StepPrediction predictStep(const AllReducePerfModel& model, const AllReducePerfModel::Key& key, int ranks,
                           double bytesPerValue, const StepShape& shape);

}  // namespace aps::perfmodel
