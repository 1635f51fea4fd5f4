#include "tools/aps_perfmodel/PerfModel.h"

#include "framework/core/Error.h"

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace aps::perfmodel {

std::vector<BenchRecord> parseBenchJsonLines(const std::string& text, bool includeSim) {
  std::vector<BenchRecord> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] != '{') continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      APS_FAIL("perfmodel: line {} is not JSON: {}", number, e.what());
    }
    if (j.value("bench", "") != "allreduce") continue;
    if (!includeSim && j.value("backend", "") == "sim") continue;
    try {
      BenchRecord r;
      r.algorithm = j.at("algorithm").get<std::string>();
      r.codec = j.at("codec").get<std::string>();
      r.ranks = j.at("ranks").get<int>();
      r.elements = j.at("elements").get<int64_t>();
      r.seconds = j.at("time_s").get<double>();
      r.bytesSentPerRank = j.value("bytes_sent_per_rank", uint64_t{0});
      r.segmentBytes = j.value("segment_bytes", int64_t{0});
      out.push_back(r);
    } catch (const nlohmann::json::exception& e) {
      APS_FAIL("perfmodel: line {} lacks a field of aps_bench_comm's output: {}", number, e.what());
    }
  }
  return out;
}

std::map<std::string, CodecRates> parseCodecBench(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    APS_FAIL("perfmodel: the codec rates are not aps_bench_codec's JSON: {}", e.what());
  }
  APS_CHECK(j.is_object() && j.contains("codecs") && j["codecs"].is_array(),
            "perfmodel: the codec rates lack aps_bench_codec's \"codecs\" list");
  std::map<std::string, CodecRates> out;
  for (const nlohmann::json& c : j["codecs"]) {
    const std::string name = c.value("codec", "");
    APS_CHECK(!name.empty(), "perfmodel: a codec rates entry has no \"codec\" name");
    auto rate = [&](const char* field) {
      APS_CHECK(c.contains(field) && c[field].is_number() && c[field].get<double>() > 0.0,
                "perfmodel: codec '{}' lacks a positive \"{}\" in the codec rates", name, field);
      return c[field].get<double>();
    };
    out[name] = {rate("encode_values_per_s"), rate("decode_values_per_s"), rate("decode_add_values_per_s"),
                 rate("decode_add_encode_values_per_s")};
  }
  return out;
}

double AlgorithmCost::codecSeconds(const CodecRates& r) const {
  return encodeValues / r.encode + decodeValues / r.decode + decodeAddValues / r.decodeAdd +
         decodeAddEncodeValues / r.decodeAddEncode;
}

std::string algorithmFamily(const std::string& algorithm) { return algorithm.substr(0, algorithm.find('/')); }

double overlapped(double wireSeconds, double codecSeconds, double segments, double efficiency) {
  return wireSeconds + codecSeconds - efficiency * std::min(wireSeconds, codecSeconds) * (1.0 - 1.0 / segments);
}

AlgorithmCost algorithmCost(const std::string& family, int ranks, int64_t elements, double bytesPerValue,
                            int64_t segmentBytes) {
  const double N = ranks;
  const double n = static_cast<double>(elements);
  const double encoded = n * bytesPerValue;
  const double flag = N - 1.0;  // one byte to every other rank, one message each
  AlgorithmCost c;
  if (family == "two_shot" || family == "native") {
    // All-to-all of encoded chunks, the owner's rank-order sum of its chunk (one decode, N - 1
    // decode-adds) and encode of it, an all-gather of the encoded sums, a decode of all of them.
    const double perValue = family == "native" ? 4.0 : bytesPerValue;
    // Pipelined: each segment of the longest chunk is one all-to-all and one all-gather round.
    const double chunkBytes = std::ceil(n / N) * perValue;
    c.segments = segmentBytes > 0 ? std::max(1.0, std::ceil(chunkBytes / static_cast<double>(segmentBytes))) : 1.0;
    c.messages = (N - 1.0) * (1.0 + 2.0 * c.segments);
    c.bytes = 2.0 * (N - 1.0) / N * n * perValue + flag;
    c.encodeValues = n + n / N;
    c.decodeValues = n / N + n;
    c.decodeAddValues = (N - 1.0) / N * n;
    return c;
  }
  if (family == "ring") {
    // N - 1 reduce-scatter hops, each a decode-add-encode of one chunk; N - 1 forwarding hops.
    c.messages = 3.0 * (N - 1.0);
    c.bytes = 2.0 * (N - 1.0) / N * encoded + flag;
    c.encodeValues = n;
    c.decodeAddEncodeValues = (N - 1.0) / N * n;
    c.decodeValues = n;
    return c;
  }
  if (family.rfind("allgather", 0) == 0) {
    // Everyone's whole encoded buffer to everyone, then every rank sums all N in rank order.
    c.messages = 2.0 * (N - 1.0);
    c.bytes = (N - 1.0) * encoded + flag;
    c.encodeValues = n;
    if (family == "allgather_rounded") {
      c.decodeAddEncodeValues = (N - 1.0) * n;
      c.decodeValues = n;
    } else if (family == "allgather_kahan") {
      // Per add: a decode and four roundings (encode + decode) of the compensated terms.
      c.decodeValues = n + (N - 1.0) * 5.0 * n;
      c.encodeValues += (N - 1.0) * 4.0 * n;
    } else {
      c.decodeValues = n;
      c.decodeAddValues = (N - 1.0) * n;
    }
    return c;
  }
  if (family == "mpi_allreduce") {
    // Large messages: ring reduce-scatter + all-gather in fp32 (OpenMPI's tuned choice).
    c.messages = 2.0 * (N - 1.0);
    c.bytes = 2.0 * (N - 1.0) / N * 4.0 * n;
    return c;
  }
  APS_FAIL("perfmodel: unknown algorithm '{}' (ring, two_shot, allgather_*, native, mpi_allreduce)", family);
}

// min ||A x - b|| subject to x >= 0: Lawson and Hanson's active-set algorithm ("Solving
// Least Squares Problems", 1974, ch. 23). Columns are scaled to unit norm first (the terms
// differ by many orders of magnitude); all-zero columns stay 0.
Eigen::VectorXd nonNegativeLeastSquares(const Eigen::MatrixXd& a, const Eigen::VectorXd& b) {
  const Eigen::Index cols = a.cols();
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(cols);
  Eigen::MatrixXd m = a;
  for (Eigen::Index j = 0; j < cols; ++j) {
    const double n = a.col(j).norm();
    if (n > 0.0) {
      scale(j) = n;
      m.col(j) /= n;
    }
  }
  std::vector<bool> passive(static_cast<size_t>(cols), false);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(cols);
  auto solvePassive = [&]() {
    std::vector<Eigen::Index> idx;
    for (Eigen::Index j = 0; j < cols; ++j)
      if (passive[static_cast<size_t>(j)]) idx.push_back(j);
    Eigen::MatrixXd sub(m.rows(), static_cast<Eigen::Index>(idx.size()));
    for (size_t k = 0; k < idx.size(); ++k) sub.col(static_cast<Eigen::Index>(k)) = m.col(idx[k]);
    const Eigen::VectorXd y = sub.colPivHouseholderQr().solve(b);
    Eigen::VectorXd z = Eigen::VectorXd::Zero(cols);
    for (size_t k = 0; k < idx.size(); ++k) z(idx[k]) = y(static_cast<Eigen::Index>(k));
    return z;
  };
  constexpr double kTolerance = 1e-12;
  for (int outer = 0; outer < 3 * static_cast<int>(cols) + 10; ++outer) {
    const Eigen::VectorXd w = m.transpose() * (b - m * x);
    Eigen::Index best = -1;
    for (Eigen::Index j = 0; j < cols; ++j) {
      if (!passive[static_cast<size_t>(j)] && a.col(j).norm() > 0.0 && w(j) > kTolerance &&
          (best < 0 || w(j) > w(best)))
        best = j;
    }
    if (best < 0) break;
    passive[static_cast<size_t>(best)] = true;
    for (int inner = 0; inner < 3 * static_cast<int>(cols) + 10; ++inner) {
      const Eigen::VectorXd z = solvePassive();
      double step = 1.0;
      bool feasible = true;
      for (Eigen::Index j = 0; j < cols; ++j) {
        if (passive[static_cast<size_t>(j)] && z(j) <= kTolerance) {
          feasible = false;
          step = std::min(step, x(j) / std::max(x(j) - z(j), kTolerance));
        }
      }
      if (feasible) {
        x = z;
        break;
      }
      x += step * (z - x);
      for (Eigen::Index j = 0; j < cols; ++j) {
        if (passive[static_cast<size_t>(j)] && x(j) <= kTolerance) {
          passive[static_cast<size_t>(j)] = false;
          x(j) = 0.0;
        }
      }
    }
  }
  for (Eigen::Index j = 0; j < cols; ++j) x(j) = std::max(0.0, x(j)) / scale(j);
  return x;
}

void AllReducePerfModel::fit(const std::vector<BenchRecord>& records,
                             const std::map<std::string, double>& bytesPerValue,
                             const std::map<std::string, CodecRates>& rates, double codecSlowdown, TimingNoise noise) {
  APS_CHECK(codecSlowdown > 0.0, "perfmodel: the codec slowdown must be positive (got {})", codecSlowdown);
  APS_CHECK(noise.resolutionSeconds >= 0.0 && noise.relative >= 0.0,
            "perfmodel: the time resolution ({} s) and the relative timing noise ({}) must not be negative",
            noise.resolutionSeconds, noise.relative);
  kappa_ = codecSlowdown;
  APS_CHECK(!records.empty(), "perfmodel: no all-reduce records to calibrate from");
  keys_.clear();
  rates_.clear();
  constexpr int64_t kMinSizeSpan = 64;
  // Columns: alpha, beta (aps's algorithms); MPI_Allreduce's alpha and beta. The codec work is
  // known (measured rates times the slowdown), so it moves to the right-hand side.
  enum Column { kAlpha, kBeta, kMpiAlpha, kMpiBeta, kColumns };
  const auto rows = static_cast<Eigen::Index>(records.size());
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(rows, kColumns);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(rows);
  // Per record: its cost terms, and its codec seconds (known: measured rates times kappa).
  std::vector<AlgorithmCost> costs;
  std::vector<double> codec(records.size(), 0.0), bytesOf(records.size(), 0.0);
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    APS_CHECK(r.seconds > 0.0, "perfmodel: record {} has time {}", i, r.seconds);
    const auto bpv = bytesPerValue.find(r.codec);
    APS_CHECK(bpv != bytesPerValue.end(), "perfmodel: unknown size of codec '{}'", r.codec);
    const Key key{algorithmFamily(r.algorithm), r.codec};
    costs.push_back(algorithmCost(key.algorithm, r.ranks, r.elements, bpv->second, r.segmentBytes));
    // Measured bytes beat the formula when the benchmark reports them.
    bytesOf[i] = r.bytesSentPerRank > 0 ? static_cast<double>(r.bytesSentPerRank) : costs.back().bytes;
    if (!knows(key)) keys_.push_back(key);
    if (key.algorithm == "mpi_allreduce") continue;
    const auto rate = rates.find(r.codec);
    APS_CHECK(rate != rates.end(),
              "perfmodel: no codec rates for '{}' (measure them with aps_bench_codec --codecs {} and pass the "
              "JSON as --codec-rates)",
              r.codec, r.codec);
    rates_[r.codec] = rate->second;
    codec[i] = kappa_ * costs.back().codecSeconds(rate->second);
  }
  // Each row is divided by its record's sigma (TimingNoise): least squares in units of how well
  // each time is known.
  resolution_ = noise.resolutionSeconds > 0.0
                    ? noise.resolutionSeconds
                    : std::min_element(records.begin(), records.end(), [](const BenchRecord& x, const BenchRecord& y) {
                        return x.seconds < y.seconds;
                      })->seconds;
  std::vector<double> sigma(records.size());
  for (size_t i = 0; i < records.size(); ++i) sigma[i] = std::hypot(resolution_, noise.relative * records[i].seconds);
  // overlapped() is linear in beta on either side of wire == codec: wire-bound,
  // T = alpha m + beta bytes + codec / S; codec-bound, T = alpha m + codec + beta bytes / S.
  // Which side a record is on depends on beta, so the fit starts wire-bound and refits until no
  // record changes side.
  std::vector<bool> codecBound(records.size(), false);
  double efficiency = 1.0;  // of the pipeline's overlap (overlapped()), searched below
  auto fillRows = [&] {
    a.setZero();
    for (Eigen::Index i = 0; i < rows; ++i) {
      const auto k = static_cast<size_t>(i);
      const BenchRecord& r = records[k];
      const AlgorithmCost& c = costs[k];
      const double s = sigma[k];
      b(i) = r.seconds / s;
      if (algorithmFamily(r.algorithm) == "mpi_allreduce") {
        a(i, kMpiAlpha) = c.messages / s;
        a(i, kMpiBeta) = bytesOf[k] / s;
        continue;
      }
      // The hidden share of the smaller term: all but 1/S of it at full efficiency.
      const double kept = 1.0 - efficiency * (1.0 - 1.0 / c.segments);
      a(i, kAlpha) = c.messages / s;
      a(i, kBeta) = (codecBound[k] ? bytesOf[k] * kept : bytesOf[k]) / s;
      b(i) = (r.seconds - (codecBound[k] ? codec[k] : codec[k] * kept)) / s;
    }
  };
  fillRows();
  // Identifiable: the columns in use must be independent (up to a relative tolerance, after
  // scaling each to unit norm), otherwise the split between them is arbitrary.
  auto independent = [&](std::initializer_list<int> cols, const char* what) {
    std::vector<int> used;
    for (int col : cols)
      if (a.col(col).norm() > 0.0) used.push_back(col);
    if (used.empty()) return;
    Eigen::MatrixXd m(rows, static_cast<Eigen::Index>(used.size()));
    for (size_t k = 0; k < used.size(); ++k)
      m.col(static_cast<Eigen::Index>(k)) = a.col(used[k]) / a.col(used[k]).norm();
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(m);
    qr.setThreshold(1e-6);
    APS_CHECK(qr.rank() == static_cast<Eigen::Index>(used.size()),
              "perfmodel: the calibration cannot tell {} apart; calibrate on several sizes (small ones for the "
              "latency, large ones for the bandwidth) and on at least two wire formats",
              what);
  };
  // Beyond independence, the sizes must span enough for the latency to show at the small end:
  // with only large sizes alpha would be fitted to the noise of bandwidth-bound runs.
  auto spansSizes = [&](bool mpi, const char* what) {
    int64_t lo = 0, hi = 0;
    for (const BenchRecord& r : records) {
      if ((algorithmFamily(r.algorithm) == "mpi_allreduce") != mpi) continue;
      lo = lo == 0 ? r.elements : std::min(lo, r.elements);
      hi = std::max(hi, r.elements);
    }
    APS_CHECK(hi == 0 || (lo > 0 && hi >= kMinSizeSpan * lo),
              "perfmodel: {} calibrate on {} to {} values; latency and bandwidth cannot be told apart unless "
              "the sizes span at least {}x (add small sizes, e.g. 64K bytes)",
              what, lo, hi, kMinSizeSpan);
  };
  spansSizes(false, "aps's algorithms");
  spansSizes(true, "MPI_Allreduce's records");
  independent({kAlpha, kBeta}, "latency and bandwidth of aps's algorithms");
  independent({kMpiAlpha, kMpiBeta}, "MPI_Allreduce's latency and bandwidth");
  auto solve = [&] {
    std::fill(codecBound.begin(), codecBound.end(), false);
    fillRows();
    Eigen::VectorXd x;
    for (int pass = 0; pass < 10; ++pass) {
      x = nonNegativeLeastSquares(a, b);
      bool changed = false;
      for (size_t k = 0; k < records.size(); ++k) {
        const bool bound = costs[k].segments > 1.0 && codec[k] > x(kBeta) * bytesOf[k];
        changed = changed || bound != codecBound[k];
        codecBound[k] = bound;
      }
      if (!changed) break;
      fillRows();
    }
    return x;
  };
  // The overlap efficiency: how much of the smaller term the pipeline really hides. Where the
  // ranks' codec work and the kernel's network work share cores (an emulated cluster on one
  // machine), less than all of it. A one-dimensional search (steps of 0.05 from 1 down to 0;
  // the fit is linear in the rest) for the least weighted squared error; a tie keeps the
  // higher efficiency, so calibrations that cannot tell keep the ideal pipeline.
  double bestError = std::numeric_limits<double>::infinity();
  Eigen::VectorXd x;
  for (int step = 20; step >= 0; --step) {
    efficiency = step / 20.0;
    const Eigen::VectorXd candidate = solve();
    const double error = (a * candidate - b).squaredNorm();
    if (step == 20 || error < bestError * (1.0 - 1e-9)) {
      bestError = error;
      efficiency_ = efficiency;
      x = candidate;
    }
  }
  alpha_ = x(kAlpha);
  beta_ = x(kBeta);
  mpiAlpha_ = x(kMpiAlpha);
  mpiBeta_ = x(kMpiBeta);

  std::vector<double> errors;
  for (const BenchRecord& r : records) {
    const double p = predict({algorithmFamily(r.algorithm), r.codec}, r.ranks, r.elements, bytesPerValue.at(r.codec),
                             r.segmentBytes);
    errors.push_back(std::fabs(p - r.seconds) / r.seconds);
  }
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2), errors.end());
  medianRelativeError_ = errors[errors.size() / 2];
}

AllReducePerfModel AllReducePerfModel::stated(double alpha, double beta, const std::map<std::string, CodecRates>& rates,
                                              const std::vector<Key>& keys, double codecSlowdown,
                                              double overlapEfficiency) {
  APS_CHECK(alpha >= 0.0 && beta > 0.0, "perfmodel: a stated network needs alpha >= 0 and beta > 0 (got {}, {})", alpha,
            beta);
  APS_CHECK(codecSlowdown > 0.0 && overlapEfficiency >= 0.0 && overlapEfficiency <= 1.0,
            "perfmodel: codec slowdown {} must be positive and overlap efficiency {} within [0, 1]", codecSlowdown,
            overlapEfficiency);
  AllReducePerfModel m;
  m.alpha_ = alpha;
  m.beta_ = beta;
  m.kappa_ = codecSlowdown;
  m.efficiency_ = overlapEfficiency;
  for (const Key& key : keys) {
    algorithmCost(key.algorithm, 2, 1, 1.0);  // throws on an unknown family
    if (key.algorithm != "mpi_allreduce") {
      const auto r = rates.find(key.codec);
      APS_CHECK(r != rates.end() && r->second.encode > 0.0 && r->second.decode > 0.0 && r->second.decodeAdd > 0.0 &&
                    r->second.decodeAddEncode > 0.0,
                "perfmodel: a stated model needs positive codec rates for '{}'", key.codec);
      m.rates_[key.codec] = r->second;
    } else {
      m.mpiAlpha_ = alpha;
      m.mpiBeta_ = beta;
    }
    if (!m.knows(key)) m.keys_.push_back(key);
  }
  return m;
}

bool AllReducePerfModel::knows(const Key& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

double AllReducePerfModel::predict(const Key& key, int ranks, int64_t elements, double bytesPerValue,
                                   int64_t segmentBytes) const {
  APS_CHECK(knows(key), "perfmodel: no calibration for algorithm '{}' with codec '{}'", key.algorithm, key.codec);
  if (ranks <= 1) return 0.0;  // nothing to communicate
  const AlgorithmCost c = algorithmCost(key.algorithm, ranks, elements, bytesPerValue, segmentBytes);
  if (key.algorithm == "mpi_allreduce") return mpiAlpha_ * c.messages + mpiBeta_ * c.bytes;
  return alpha_ * c.messages +
         overlapped(beta_ * c.bytes, kappa_ * c.codecSeconds(rates_.at(key.codec)), c.segments, efficiency_);
}

StepPrediction predictStep(const AllReducePerfModel& model, const AllReducePerfModel::Key& key, int ranks,
                           double bytesPerValue, const StepShape& shape) {
  APS_CHECK(shape.elements >= 0 && shape.layers >= 0 && shape.bucketElements >= 0, "perfmodel: negative step shape");
  StepPrediction p;
  const double compute = shape.forwardSeconds + shape.backwardSeconds;
  if (ranks <= 1 || shape.elements == 0) {
    p.stepSeconds = compute;
    return p;
  }
  const int64_t cap = shape.bucketElements > 0 ? std::min(shape.bucketElements, shape.elements) : shape.elements;
  const int64_t full = shape.elements / cap, rest = shape.elements % cap;
  const int64_t buckets = full + (rest > 0 ? 1 : 0);
  const double tFull = model.predict(key, ranks, cap, bytesPerValue);
  const double tRest = rest > 0 ? model.predict(key, ranks, rest, bytesPerValue) : 0.0;
  double aps = 0.0;
  if (shape.aps) {
    const double n1 = ranks - 1.0;
    aps =
        model.alpha() * n1 * static_cast<double>(buckets) + model.beta() * n1 * 4.0 * static_cast<double>(shape.layers);
  }
  p.commSeconds = static_cast<double>(full) * tFull + tRest + aps;
  // The last bucket reduced holds the first layers: ready only when backward ends.
  const double last = (rest > 0 ? tRest : tFull) + aps / static_cast<double>(buckets);
  p.exposedSeconds = std::max(last, p.commSeconds - shape.backwardSeconds);
  p.stepSeconds = compute + p.exposedSeconds;
  return p;
}

double dataParallelSpeedup(const AllReducePerfModel& model, const AllReducePerfModel::Key& key, int ranks,
                           double bytesPerValue, const StepShape& shape) {
  const double compute = shape.forwardSeconds + shape.backwardSeconds;
  APS_CHECK(ranks >= 1 && compute > 0.0, "perfmodel: a speedup needs ranks >= 1 and a positive compute time");
  return ranks * compute / predictStep(model, key, ranks, bytesPerValue, shape).stepSeconds;
}

// ---- Dettmers' speedup model (arXiv:1511.04561v4, appendix 5) ----

const std::vector<DettmersLayer>& dettmersAlexNetLayers() {
  // Table 4 (NervanaGPU, GTX Titan X, batch 128): forward / backward / update ms; weights from
  // the layer shapes of Tables 3 and 4.
  static const std::vector<DettmersLayer> layers{
      {"conv11, stride 4, 3->64", 11 * 11 * 3 * 64, 4.0, 1.0, 3.5},
      {"conv5, 64->192", 5 * 5 * 64 * 192, 10.0, 11.0, 11.0},
      {"conv3, 192->384", 3 * 3 * 192 * 384, 5.0, 6.0, 5.0},
      {"conv3, 384->256", 3 * 3 * 384 * 256, 6.5, 5.5, 6.5},
      {"conv3, 256->256", 3 * 3 * 256 * 256, 4.0, 4.0, 5.0},
      {"fc 9216->3072", int64_t{9216} * 3072, 1.3, 1.3, 1.5},
      {"fc 3072->3072", int64_t{3072} * 3072, 0.45, 0.45, 0.5},
      {"fc 3072->1000", int64_t{3072} * 1000, 0.4, 0.4, 0.2},
  };
  return layers;
}

DettmersNode dettmersAlexNetNode(double totalMs) {
  DettmersNode n;
  n.totalMs = totalMs;
  // F and F_par: Table 4's fc rows summed (forward + backward + update), unsplit and split 4 ways.
  n.fcMs = 0.0;
  for (const DettmersLayer& l : dettmersAlexNetLayers())
    if (l.name.rfind("fc", 0) == 0) n.fcMs += l.fpropMs + l.bpropMs + l.updateMs;
  n.parallelFcMs = (0.9 + 0.9 + 0.43) + (0.3 + 0.3 + 0.13) + (0.15 + 0.15 + 0.08);
  // Table 3: the sync of conv 1's gradient (the last one backward produces), and the sync times of
  // the model-parallel transfers in the order of 5.1.2's sum: the conv 3 activations, the three
  // fc layers' outputs, two error transfers; each against the computation 5.1.2 hides it under.
  n.convPenaltyMs = 0.05;
  n.transferMs32 = {0.9, 1.1, 1.1, 0.4, 1.1, 1.1};
  n.transferMs8 = {0.4, 0.5, 0.5, 0.25, 0.5, 0.5};
  n.hiddenUnderMs = {0.9, 0.3, 0.15, 0.3, 0.9, 0.64};
  n.unhiddenTransfers = 5.0;
  return n;
}

double dettmersFcPenaltyMs(const DettmersNode& node, int bits) {
  APS_CHECK(bits == 32 || bits == 8, "perfmodel: Dettmers' model has 32- and 8-bit transfers, not {}-bit", bits);
  const std::vector<double>& t = bits == 32 ? node.transferMs32 : node.transferMs8;
  APS_CHECK(!t.empty() && t.size() == node.hiddenUnderMs.size(),
            "perfmodel: each model-parallel transfer needs a computation to hide under");
  double penalty = node.unhiddenTransfers * t.front();
  for (size_t i = 0; i < t.size(); ++i) penalty += std::max(0.0, t[i] - node.hiddenUnderMs[i]);
  return penalty;
}

double dettmersNodeSpeedup(const DettmersNode& node, int bits) {
  APS_CHECK(node.gpus >= 1 && node.totalMs > node.fcMs && node.fcMs >= 0.0,
            "perfmodel: a node needs >= 1 GPU and a total time above its fc time");
  const double k = node.gpus;
  return k * node.totalMs /
         ((node.totalMs - node.fcMs) + node.convPenaltyMs + k * node.parallelFcMs + dettmersFcPenaltyMs(node, bits));
}

DettmersCluster dettmersAlexNetCluster(double totalMs, int gpus) {
  DettmersCluster c;
  c.totalMs = totalMs;
  c.gpus = gpus;
  c.fcMs = dettmersAlexNetNode(totalMs).fcMs;
  // Table 5's latencies (KiB: 108 "kB" is conv 384->256's 884736 fp32 gradient values / 32
  // nodes = 110592 bytes): the 32-bit column, which rises with the size, and below its smallest
  // size the 8-bit column's fc rows. Left out: the 8-bit column's 18 KiB (0.007 ms, below the
  // 13.5 KiB row), 144 KiB (0.04 against the 32-bit column's 0.035) and 1734 KiB (0.06 ms,
  // where the 32-bit column gives 0.3-0.7 ms for 1152-2312 KiB).
  c.latencyCurve = {{3.0, 0.006},   {6.0, 0.006},  {13.5, 0.008}, {24.0, 0.008}, {48.0, 0.015}, {108.0, 0.03},
                    {144.0, 0.035}, {288.0, 0.07}, {576.0, 0.1},  {1152.0, 0.3}, {2312.0, 0.7}, {13872.0, 5.0}};
  return c;
}

void checkDettmersCluster(const DettmersCluster& c, int64_t subBatch) {
  APS_CHECK(c.gpusPerNode >= 1 && c.gpus % c.gpusPerNode == 0 && c.nodes() >= 2,
            "perfmodel: {} GPUs do not fill at least 2 nodes of {} GPUs", c.gpus, c.gpusPerNode);
  APS_CHECK(c.batchPerGpu >= 1, "perfmodel: the batch per GPU must be positive (got {})", c.batchPerGpu);
  APS_CHECK(subBatch >= 1 && subBatch <= c.globalBatch(),
            "perfmodel: sub-batch {} is not within 1..{} (the global batch of {} GPUs x {})", subBatch, c.globalBatch(),
            c.gpus, c.batchPerGpu);
  APS_CHECK(c.totalMs > c.fcMs && c.fcMs >= 0.0 && c.hiddenUnderMs >= 0.0 && c.infinibandGBps > 0.0 && c.pcieGBps > 0.0,
            "perfmodel: the cluster's times and bandwidths must be positive, and the total above the fc time");
}

const std::vector<DettmersTabulatedSync>& dettmersTable6() {
  static const std::vector<DettmersTabulatedSync> rows{{128, 2.1, 0.35},   {256, 4.2, 0.55},   {512, 7.15, 1.13},
                                                       {1024, 17.4, 2.25}, {2048, 25.5, 3.26}, {12288, 250.0, 31.0}};
  return rows;
}

DettmersClusterStep dettmersClusterStep(const DettmersCluster& c, int64_t subBatch, double syncMs) {
  checkDettmersCluster(c, subBatch);
  APS_CHECK(syncMs >= 0.0, "perfmodel: a sync time cannot be negative (got {} ms)", syncMs);
  DettmersClusterStep s;
  s.passes = static_cast<double>(c.globalBatch()) / static_cast<double>(subBatch);
  s.fcMs = s.passes * c.fcMs;
  s.syncMs = syncMs;
  s.syncTotalMs = std::max(syncMs, (c.nodes() - 1.0) * (syncMs - c.hiddenUnderMs));
  s.stepMs = (c.totalMs - c.fcMs) + s.fcMs + s.syncTotalMs;
  s.speedup = c.gpus * c.totalMs / s.stepMs;
  return s;
}

double dettmersActivationMessageBytes(const DettmersCluster& c, int64_t subBatch, double bytesPerValue) {
  checkDettmersCluster(c, subBatch);
  return static_cast<double>(subBatch) * static_cast<double>(c.activationsPerSample) * bytesPerValue / c.nodes();
}

double dettmersLatencyMs(const DettmersCluster& c, double messageBytes) {
  const auto& p = c.latencyCurve;
  APS_CHECK(p.size() >= 2, "perfmodel: the latency curve needs at least two points");
  const double kib = messageBytes / 1024.0;
  if (kib <= p.front().first) return p.front().second;
  size_t i = 1;
  while (i + 1 < p.size() && kib > p[i].first) ++i;
  const auto& [x0, y0] = p[i - 1];
  const auto& [x1, y1] = p[i];
  return y0 + (kib - x0) * (y1 - y0) / (x1 - x0);
}

namespace {
// 2 PCIe messages of a GPU's share, then nodes - 1 InfiniBand messages of a node's share (5.2.2).
double dettmersMessagesMs(const DettmersCluster& c, double nodeShareBytes) {
  const double pcie = 2.0 * (nodeShareBytes / c.gpusPerNode) / (c.pcieGBps * 1e6);
  const double infiniband =
      (c.nodes() - 1.0) * (dettmersLatencyMs(c, nodeShareBytes) + nodeShareBytes / (c.infinibandGBps * 1e6));
  return pcie + infiniband;
}
}  // namespace

double dettmersSyncFromTrafficMs(const DettmersCluster& c, int64_t subBatch, double bytesPerValue) {
  return dettmersMessagesMs(c, dettmersActivationMessageBytes(c, subBatch, bytesPerValue));
}

double dettmersGradientSyncMs(const DettmersCluster& c, int64_t weights, double bytesPerValue) {
  checkDettmersCluster(c, 1);
  return 2.0 * dettmersMessagesMs(c, static_cast<double>(weights) * bytesPerValue / c.nodes());
}

}  // namespace aps::perfmodel
