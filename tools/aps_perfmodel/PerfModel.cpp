#include "tools/aps_perfmodel/PerfModel.h"

#include "framework/core/Error.h"

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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
      out.push_back(r);
    } catch (const nlohmann::json::exception& e) {
      APS_FAIL("perfmodel: line {} lacks a field of aps_bench_comm's output: {}", number, e.what());
    }
  }
  return out;
}

std::string algorithmFamily(const std::string& algorithm) { return algorithm.substr(0, algorithm.find('/')); }

AlgorithmCost algorithmCost(const std::string& family, int ranks, int64_t elements, double bytesPerValue) {
  const double N = ranks;
  const double n = static_cast<double>(elements);
  const double encoded = n * bytesPerValue;
  const double flag = N - 1.0;  // one byte to every other rank, one message each
  if (family == "two_shot" || family == "native") {
    // all-to-all of chunks, then all-gather of the encoded sums
    const double perValue = family == "native" ? 4.0 : bytesPerValue;
    return {3.0 * (N - 1.0), 2.0 * (N - 1.0) / N * n * perValue + flag, 3.0 * n + n / N};
  }
  if (family == "ring") {
    return {3.0 * (N - 1.0), 2.0 * (N - 1.0) / N * encoded + flag, 3.0 * n - n / N};
  }
  if (family.rfind("allgather", 0) == 0) {
    return {2.0 * (N - 1.0), (N - 1.0) * encoded + flag, (N + 2.0) * n};
  }
  if (family == "mpi_allreduce") {
    // Large messages: ring reduce-scatter + all-gather in fp32 (OpenMPI's tuned choice).
    return {2.0 * (N - 1.0), 2.0 * (N - 1.0) / N * 4.0 * n, (N - 1.0) / N * n};
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
                             const std::map<std::string, double>& bytesPerValue) {
  APS_CHECK(!records.empty(), "perfmodel: no all-reduce records to calibrate from");
  gamma_.clear();
  // Columns: 0 alpha, 1 beta, 2 MPI's alpha, 3 MPI's beta, then one gamma per (algorithm, codec).
  constexpr int kFirstGamma = 4;
  auto isMpi = [](const Key& key) { return key.algorithm == "mpi_allreduce"; };
  std::map<Key, int> column;
  for (const BenchRecord& r : records) {
    const Key key{algorithmFamily(r.algorithm), r.codec};
    if (!isMpi(key) && !column.count(key)) column.emplace(key, kFirstGamma + static_cast<int>(column.size()));
  }
  const auto rows = static_cast<Eigen::Index>(records.size());
  const auto cols = static_cast<Eigen::Index>(kFirstGamma + column.size());
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(rows, cols);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const BenchRecord& r = records[static_cast<size_t>(i)];
    APS_CHECK(r.seconds > 0.0, "perfmodel: record {} has time {}", i, r.seconds);
    const auto bpv = bytesPerValue.find(r.codec);
    APS_CHECK(bpv != bytesPerValue.end(), "perfmodel: unknown size of codec '{}'", r.codec);
    const AlgorithmCost c = algorithmCost(algorithmFamily(r.algorithm), r.ranks, r.elements, bpv->second);
    // Measured bytes beat the formula when the benchmark reports them.
    const double bytes = r.bytesSentPerRank > 0 ? static_cast<double>(r.bytesSentPerRank) : c.bytes;
    // Rows divided by the measured time: least squares on relative error.
    const Key key{algorithmFamily(r.algorithm), r.codec};
    if (isMpi(key)) {
      a(i, 2) = c.messages / r.seconds;
      a(i, 3) = bytes / r.seconds;
    } else {
      a(i, 0) = c.messages / r.seconds;
      a(i, 1) = bytes / r.seconds;
      a(i, column.at(key)) = c.work / r.seconds;
    }
  }
  const Eigen::VectorXd x = nonNegativeLeastSquares(a, b);
  alpha_ = x(0);
  beta_ = x(1);
  mpiAlpha_ = x(2);
  mpiBeta_ = x(3);
  for (const auto& [key, col] : column) gamma_[key] = x(col);
  for (const BenchRecord& r : records) {
    const Key key{algorithmFamily(r.algorithm), r.codec};
    if (isMpi(key)) gamma_[key] = 0.0;  // known, with no codec term
  }

  std::vector<double> errors;
  for (const BenchRecord& r : records) {
    const double p = predict({algorithmFamily(r.algorithm), r.codec}, r.ranks, r.elements, bytesPerValue.at(r.codec));
    errors.push_back(std::fabs(p - r.seconds) / r.seconds);
  }
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2), errors.end());
  medianRelativeError_ = errors[errors.size() / 2];
}

double AllReducePerfModel::predict(const Key& key, int ranks, int64_t elements, double bytesPerValue) const {
  const auto g = gamma_.find(key);
  APS_CHECK(g != gamma_.end(), "perfmodel: no calibration for algorithm '{}' with codec '{}'", key.algorithm,
            key.codec);
  if (ranks <= 1) return 0.0;  // nothing to communicate
  const AlgorithmCost c = algorithmCost(key.algorithm, ranks, elements, bytesPerValue);
  if (key.algorithm == "mpi_allreduce") return mpiAlpha_ * c.messages + mpiBeta_ * c.bytes;
  return alpha_ * c.messages + beta_ * c.bytes + g->second * c.work;
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

}  // namespace aps::perfmodel
