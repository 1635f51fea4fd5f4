#pragma once

#include "framework/train/EvalMetrics.h"
#include "framework/train/TensorBoard.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
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
  int64_t stepsPerEpoch = 0;  // for log lines' epoch numbers (0: not known)

  // Log lines number epochs from 1: the epoch that step `step` belongs to (so a train line
  // inside epoch 1 and the evaluation after it both say 1), and of `epochs()`.
  int64_t displayEpoch() const { return stepsPerEpoch > 0 ? (step + stepsPerEpoch - 1) / stepsPerEpoch : epoch; }
  int64_t epochs() const { return stepsPerEpoch > 0 ? (totalSteps + stepsPerEpoch - 1) / stepsPerEpoch : 0; }
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
  // Only the root rank writes; `progress`: logging.progress. The run's elapsed time counts
  // from here.
  RunLog(bool root, bool progress) : root_(root), progress_(progress), start_(std::chrono::steady_clock::now()) {}

  // Opens the metrics file (appending when resuming); throws naming the file.
  void openMetrics(const std::string& path, bool append);
  // Also writes every record's numbers to a TensorBoard event file in `dir` ("" or "none":
  // not), tagged <record type>/<key> ("validation/top1" for an evaluation on the validation
  // split) at the record's step.
  void openTensorBoard(const std::string& dir);
  void write(const nlohmann::json& record);

  // The progress bar after a step of `stepSeconds` (a terminal only), with the rate and ETA
  // of the smoothed step time.
  void progress(const RunPosition& at, double stepSeconds, int64_t globalBatch);

  // The interval's log line and "train" record (with the elapsed time and the ETA at the
  // smoothed step time), then resets the interval. `extra` holds the
  // record's other fields (lr, skipped steps, scaling state, per-layer statistics).
  void interval(IntervalStats& interval, const RunPosition& at, double lr, nlohmann::json extra);

  // An evaluation's log line and record ("eval" or "final"), with the record's other fields
  // in `extra` (the final record: the fidelity probe's summary; "split": "validation" for an
  // evaluation on data.validation_samples, which the line then names).
  void evaluation(const TrainSummary& summary, const char* type, const RunPosition& at, int64_t skipped,
                  nlohmann::json extra = nlohmann::json::object());

 private:
  bool root_, progress_;
  std::chrono::steady_clock::time_point start_;
  std::ofstream metrics_;
  std::unique_ptr<EventFileWriter> tensorboard_;
  SmoothedStepTime stepTime_;
};

}  // namespace aps::train
