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
};

// Parses aps_bench_comm JSON lines; lines with another "bench" or backend "sim" are skipped
// unless includeSim. Throws aps::Error naming the line on malformed input.
std::vector<BenchRecord> parseBenchJsonLines(const std::string& text, bool includeSim = false);

// min ||A x - b|| subject to x >= 0 (Lawson-Hanson), used by AllReducePerfModel::fit.
Eigen::VectorXd nonNegativeLeastSquares(const Eigen::MatrixXd& a, const Eigen::VectorXd& b);

// The shape of an algorithm at N ranks for n fp32 values: messages a rank sends one after
// another (latency terms), bytes it sends, and values its CPU touches (codec work).
struct AlgorithmCost {
  double messages = 0.0;
  double bytes = 0.0;
  double work = 0.0;
};

// The family of an algorithm name: the part before '/' ("allgather_rounded/e4m3" ->
// "allgather_rounded"). Known: ring, two_shot, allgather_*, native, mpi_allreduce.
std::string algorithmFamily(const std::string& algorithm);

// Cost terms for `family` with a codec of `bytesPerValue` (e.g. 1 for e4m3, 4 for fp32).
// Includes the one-byte-per-rank non-finite flag round of comm's algorithms.
AlgorithmCost algorithmCost(const std::string& family, int ranks, int64_t elements, double bytesPerValue);

// An alpha-beta-gamma model (Hockney's alpha-beta model plus a compute term):
//   T(alg, codec, N, n) = alpha * messages + beta * bytes + gamma[alg, codec] * work
// alpha (s per message) and beta (s per byte) are shared by aps's algorithms (one network,
// one transport: comm's exchange rounds), gamma (s per value) is per algorithm and codec (the
// codec's CPU speed). MPI_Allreduce is a black box (the MPI library picks its algorithm,
// segmenting and protocol per size), so it gets its own alpha and beta, measured on the same
// network, and no gamma. Fitted by non-negative least squares on relative error, so small
// and large sizes weigh alike.
class AllReducePerfModel {
 public:
  struct Key {
    std::string algorithm;  // family, e.g. "two_shot"
    std::string codec;
    auto operator<=>(const Key&) const = default;
  };

  // bytesPerValue(codec) must be known for every record's codec.
  void fit(const std::vector<BenchRecord>& records, const std::map<std::string, double>& bytesPerValue);

  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  double mpiAlpha() const { return mpiAlpha_; }
  double mpiBeta() const { return mpiBeta_; }
  // A target network: aps's alpha and beta become these, MPI_Allreduce's scale alike.
  void setNetwork(double alpha, double beta) {
    if (alpha_ > 0.0) mpiAlpha_ *= alpha / alpha_;
    if (beta_ > 0.0) mpiBeta_ *= beta / beta_;
    alpha_ = alpha;
    beta_ = beta;
  }
  const std::map<Key, double>& gamma() const { return gamma_; }
  bool knows(const Key& key) const { return gamma_.count(key) > 0; }

  double predict(const Key& key, int ranks, int64_t elements, double bytesPerValue) const;
  // Median |predicted - measured| / measured over the records it was fitted on.
  double medianRelativeError() const { return medianRelativeError_; }

 private:
  double alpha_ = 0.0;
  double beta_ = 0.0;
  double mpiAlpha_ = 0.0;
  double mpiBeta_ = 0.0;
  std::map<Key, double> gamma_;
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
