#pragma once

#include <Eigen/Dense>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
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

  // A model whose terms are stated rather than fitted: a network's alpha (s per message) and
  // beta (s per byte), each codec's one-core rates, and the (algorithm, codec) pairs it predicts
  // (e.g. a published setting, where there is nothing to calibrate on).
  static AllReducePerfModel stated(double alpha, double beta, const std::map<std::string, CodecRates>& rates,
                                   const std::vector<Key>& keys, double codecSlowdown = 1.0,
                                   double overlapEfficiency = 1.0);

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

// Weak scaling of data parallelism: N ranks each run the one-rank step (forward + backward) on
// their own batch, so the speedup over one rank is N (forward + backward) / predicted step.
double dataParallelSpeedup(const AllReducePerfModel& model, const AllReducePerfModel::Key& key, int ranks,
                           double bytesPerValue, const StepShape& shape);

// ---------------------------------------------------------------------------------------------
// Dettmers' speedup model: T. Dettmers, "8-Bit Approximations for Parallelism in Deep Learning",
// ICLR 2016, arXiv:1511.04561v4, section 3.3 (Table 1) and appendix 5 (Tables 3-7), for AlexNet
// as in Krizhevsky's "one weird trick" (arXiv:1404.5997): convolutions data parallel, the fully
// connected (fc) layers fed in sub-batches. All times in milliseconds. docs/ALGORITHMS.md,
// "Dettmers' speedup model", says which terms the paper states and which are ours.

// One node of K GPUs (appendix 5.1): the fc layers split over the K GPUs by output neurons and
// run as K passes of a 1/K sub-batch, each transfer hidden under one computation:
//   speedup = K T / ((T - F) + conv penalty + K F_par + fc penalty(bits))            (5.1.3)
//   fc penalty = sum_i max(0, transfer_i - hidden_under_i) + u * transfer_0          (5.1.2)
// where transfer_0 is the convolutional activations' sync and u of those transfers (the first
// sub-batch's activations, the last ones' errors) have nothing to hide under.
struct DettmersNode {
  int gpus = 4;                                   // K
  double totalMs = 104.1;                         // T: a full forward-backward-update on one GPU
  double fcMs = 6.5;                              // F: of which the fc layers
  double parallelFcMs = 3.34;                     // F_par: the fc layers with their outputs split K ways, one pass
  double convPenaltyMs = 0.05;                    // the first convolution's gradient sync, which nothing hides
  std::vector<double> transferMs32, transferMs8;  // per model-parallel transfer (sync time)
  std::vector<double> hiddenUnderMs;              // the computation each one overlaps
  double unhiddenTransfers = 5.0;                 // u
};

// His parameters (Tables 3 and 4, NervanaGPU kernels on a GTX Titan X; totalMs = 177 for the
// convnet2 kernels that Krizhevsky used).
DettmersNode dettmersAlexNetNode(double totalMs = 104.1);
double dettmersFcPenaltyMs(const DettmersNode& node, int bits);  // bits: 32 or 8
double dettmersNodeSpeedup(const DettmersNode& node, int bits);

// A cluster (appendix 5.2, 32 nodes of 3 GPUs, FDR InfiniBand): the convolutions data parallel
// on a batch of b per GPU (global batch B = N b), the conv activations then synchronised
// sub-batch by sub-batch (s values of the global batch at a time, B/s passes) and the fc layers
// run on each pass (his model discards their model parallelism at this scale: F per pass). Every
// sync after the first hides under the next layer's matrix multiplication (h = 1.3 ms):
//   speedup(s) = N T / ((T - F) + (B/s) F + S(s)),
//   S(s) = max(sync(s), (nodes - 1) (sync(s) - h))
// (the first sync hides under nothing, so S >= sync). The paper states the terms and tabulates
// S(s) (Table 6) and the speedups (Table 7) but writes neither formula out; these two reproduce
// all 24 entries of Table 7 from Table 6's sync times.
struct DettmersCluster {
  int gpus = 96;  // N
  int gpusPerNode = 3;
  int64_t batchPerGpu = 128;            // b
  double totalMs = 104.1;               // T
  double fcMs = 6.5;                    // F
  double hiddenUnderMs = 1.3;           // h: fc 9216->3072 forward on one GPU (Table 4)
  int64_t activationsPerSample = 9216;  // conv 3 output, 256 x 6 x 6: what the fc layers take in
  double infinibandGBps = 6.0;          // between nodes (5.2.1)
  double pcieGBps = 5.0;                // within a node (5.1.1)
  // InfiniBand latency per message against message size (KiB, ms), read off MPI charts by
  // him (Table 5); linear in between, the last segment's slope beyond.
  std::vector<std::pair<double, double>> latencyCurve;
  int nodes() const { return gpus / gpusPerNode; }
  int64_t globalBatch() const { return static_cast<int64_t>(gpus) * batchPerGpu; }
};

DettmersCluster dettmersAlexNetCluster(double totalMs = 104.1, int gpus = 96);
// Throws aps::Error unless the GPUs fill whole nodes (at least 2) and 0 < s <= B.
void checkDettmersCluster(const DettmersCluster& cluster, int64_t subBatch);

// His Table 6: sync time per pass (ms) for the 96-GPU cluster at each sub-batch size, 32- and
// 8-bit. His 8-bit messages are 1/8 of the 32-bit ones (Table 5), not 1/4.
struct DettmersTabulatedSync {
  int64_t subBatch = 0;
  double ms32 = 0.0;
  double ms8 = 0.0;
};
const std::vector<DettmersTabulatedSync>& dettmersTable6();

struct DettmersClusterStep {
  double passes = 0.0;       // B / s
  double fcMs = 0.0;         // (B/s) F
  double syncMs = 0.0;       // one pass's activation sync
  double syncTotalMs = 0.0;  // S(s)
  double stepMs = 0.0;       // (T - F) + (B/s) F + S(s)
  double speedup = 0.0;      // N T / stepMs
};
DettmersClusterStep dettmersClusterStep(const DettmersCluster& cluster, int64_t subBatch, double syncMs);

// The model-parallel traffic of one pass: the s x 9216 conv activations at bytesPerValue each,
// one share per node (bytes per InfiniBand message).
double dettmersActivationMessageBytes(const DettmersCluster& cluster, int64_t subBatch, double bytesPerValue);
double dettmersLatencyMs(const DettmersCluster& cluster, double messageBytes);
// The sync of one pass from that traffic, by the message scheme he states for the gradients
// (5.2.2): 2 PCIe messages of a GPU's third of the share, then nodes - 1 InfiniBand messages of
// the share, each latency(size) + size / bandwidth.
double dettmersSyncFromTrafficMs(const DettmersCluster& cluster, int64_t subBatch, double bytesPerValue);
// The data-parallel gradient sync of a layer of `weights` values the same way, done twice (the
// raw gradients out, the sums back; 5.2.2).
double dettmersGradientSyncMs(const DettmersCluster& cluster, int64_t weights, double bytesPerValue);

// AlexNet as his tables list it (one weird trick's columns merged: fc 9216-3072-3072-1000).
struct DettmersLayer {
  std::string name;
  int64_t weights = 0;
  double fpropMs = 0.0, bpropMs = 0.0, updateMs = 0.0;  // one GPU, batch 128 (Table 4)
};
const std::vector<DettmersLayer>& dettmersAlexNetLayers();

}  // namespace aps::perfmodel
