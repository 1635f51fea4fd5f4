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

// The progress bar's step time: the mean of the first `seedSteps` steps, then an exponential
// moving average (weight `alpha` for the newest step), so that one slow step (an evaluation's
// neighbour, a checkpoint, a busy machine) hardly moves the rate and the ETA.
struct SmoothedStepTime {
  double alpha = 0.1;
  int64_t seedSteps = 10;
  int64_t steps = 0;   // steps seen
  double seconds = 0;  // the smoothed step time (0 before the first step)

  void update(double stepSeconds);
  // Seconds for `remainingSteps` more steps at the smoothed step time.
  double eta(int64_t remainingSteps) const;
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

  // The progress bar after a step of `stepSeconds` (a terminal only), with the rate and ETA
  // of the smoothed step time.
  void progress(const RunPosition& at, double stepSeconds, int64_t globalBatch);

  // The interval's log line and "train" record, then resets the interval. `extra` holds the
  // record's other fields (lr, skipped steps, scaling state, per-layer statistics).
  void interval(IntervalStats& interval, const RunPosition& at, double lr, nlohmann::json extra);

  // An evaluation's log line and record ("eval" or "final"), with the record's other fields
  // in `extra` (the final record: the fidelity probe's summary).
  void evaluation(const TrainSummary& summary, const char* type, const RunPosition& at, int64_t skipped,
                  nlohmann::json extra = nlohmann::json::object());

 private:
  bool root_, progress_;
  std::ofstream metrics_;
  SmoothedStepTime stepTime_;
};

}  // namespace aps::train
