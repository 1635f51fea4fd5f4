#pragma once

#include "framework/train/EvalMetrics.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace aps::train {

// Per-step timings and traffic, summed over a logging interval.
struct IntervalStats {
  int64_t steps = 0, images = 0;
  double loss = 0, dataWait = 0, compute = 0, comm = 0, exposed = 0, seconds = 0;
  uint64_t bytes = 0;
};

// Where the run stands, for log lines and records.
struct RunPosition {
  int64_t epoch = 0, step = 0, totalSteps = 0;
};

// What a run reports: log lines (spdlog, rank 0), the progress bar on a terminal, and the
// JSON-lines metrics file (logging.metrics_file; non-finite values as "inf"/"nan").
class RunLog {
 public:
  // Only the root rank writes; `progress`: logging.progress.
  RunLog(bool root, bool progress) : root_(root), progress_(progress) {}

  // Opens the metrics file (appending when resuming); throws naming the file.
  void openMetrics(const std::string& path, bool append);
  void write(const nlohmann::json& record);

  // The progress bar with rate and ETA after a step of `stepSeconds` (a terminal only).
  void progress(const RunPosition& at, double stepSeconds, int64_t globalBatch) const;

  // The interval's log line and "train" record, then resets the interval. `extra` holds the
  // record's other fields (lr, skipped steps, scaling state, per-layer statistics).
  void interval(IntervalStats& interval, const RunPosition& at, double lr, nlohmann::json extra);

  // An evaluation's log line and record ("eval" or "final").
  void evaluation(const TrainSummary& summary, const char* type, const RunPosition& at, int64_t skipped);

 private:
  bool root_, progress_;
  std::ofstream metrics_;
};

}  // namespace aps::train
