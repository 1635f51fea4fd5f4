#include "framework/train/RunLog.h"

#include "framework/core/Error.h"
#include "framework/core/Logging.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace aps::train {

namespace {
bool stderrIsTerminal() {
  static const bool terminal = isatty(STDERR_FILENO) != 0;
  return terminal;
}
}  // namespace

void RunLog::openMetrics(const std::string& path, bool append) {
  if (!root_ || path.empty()) return;
  metrics_.open(path, append ? std::ios::app : std::ios::trunc);
  APS_CHECK(metrics_.good(), "cannot write metrics file '{}'", path);
}

void RunLog::openTensorBoard(const std::string& dir) {
  if (!root_ || dir.empty() || dir == "none") return;
  tensorboard_ = std::make_unique<EventFileWriter>(dir);
}

namespace {
// The numbers of a record (not its position) as TensorBoard scalars.
void writeScalars(EventFileWriter& out, const nlohmann::json& record) {
  const int64_t step = record.value("step", int64_t{0});
  std::string prefix = record.value("type", std::string("record"));
  if (record.value("split", std::string()) == "validation") prefix = "validation";
  const double wallTime =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [key, value] : record.items()) {
    if (!value.is_number() || key == "step" || key == "epoch") continue;
    out.scalar(prefix + "/" + key, value.get<double>(), step, wallTime);
  }
  out.flush();
}
}  // namespace

void RunLog::write(const nlohmann::json& record) {
  if (tensorboard_) writeScalars(*tensorboard_, record);
  if (!metrics_.is_open()) return;
  // Every record says when it was written (UTC, milliseconds), first.
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  nlohmann::ordered_json stamped{{"time", fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z",
                                                      fmt::gmtime(std::chrono::system_clock::to_time_t(now)), ms)}};
  for (const auto& [key, value] : record.items()) stamped[key] = value;
  metrics_ << stamped.dump() << "\n" << std::flush;
}

void SmoothedStepTime::update(double stepSeconds) {
  if (!std::isfinite(stepSeconds) || stepSeconds < 0) return;
  ++steps;
  // The running mean while seeding (the first step alone would weigh 1), then the EMA.
  const double weight = steps <= seedSteps ? 1.0 / static_cast<double>(steps) : alpha;
  seconds += weight * (stepSeconds - seconds);
}

double SmoothedStepTime::eta(int64_t remainingSteps) const {
  return seconds * static_cast<double>(std::max<int64_t>(remainingSteps, 0));
}

namespace {
// h:mm:ss
std::string clockTime(double seconds) {
  const auto s = std::isfinite(seconds) && seconds > 0 ? static_cast<int64_t>(std::llround(seconds)) : int64_t{0};
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60);
}
}  // namespace

void RunLog::progress(const RunPosition& at, double stepSeconds, int64_t globalBatch) {
  stepTime_.update(stepSeconds);
  if (!stderrIsTerminal() || !progress_ || !root_) return;
  const double step = stepTime_.seconds;
  const double ips = step > 0 ? static_cast<double>(globalBatch) / step : 0.0;
  const auto eta = static_cast<int64_t>(std::llround(stepTime_.eta(at.totalSteps - at.step)));
  const int width = 30;
  const auto filled = static_cast<int>(width * at.step / std::max<int64_t>(at.totalSteps, 1));
  fmt::print(stderr, "\r[{}{}] {}/{} {:.0f} img/s ETA {}:{:02d}\033[K", std::string(static_cast<size_t>(filled), '#'),
             std::string(static_cast<size_t>(width - filled), '.'), at.step, at.totalSteps, ips, eta / 60, eta % 60);
  std::fflush(stderr);
}

void RunLog::interval(IntervalStats& interval, const RunPosition& at, double lr, nlohmann::json extra) {
  if (interval.steps == 0) return;
  if (stderrIsTerminal() && progress_ && root_) fmt::print(stderr, "\r\033[K");
  const double ips = interval.seconds > 0 ? static_cast<double>(interval.images) / interval.seconds : 0.0;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = stepTime_.eta(at.totalSteps - at.step);
  spdlog::info(
      "epoch {}/{} step {}/{} loss {:.4f} lr {:.5f} {:.0f} img/s data-wait {:.1f}% exposed-comm {:.1f}% "
      "sent {:.2f} MB/step elapsed {} ETA {}",
      at.displayEpoch(), at.epochs(), at.step, at.totalSteps, interval.loss / interval.steps, lr, ips,
      100.0 * interval.dataWait / interval.seconds, 100.0 * interval.exposed / interval.seconds,
      static_cast<double>(interval.bytes) / 1e6, clockTime(elapsed), clockTime(eta));
  nlohmann::json record{{"type", "train"},
                        {"epoch", at.epoch},
                        {"step", at.step},
                        {"loss", metricValue(interval.loss / static_cast<double>(interval.steps))},
                        {"lr", lr},
                        {"images_per_s", ips},
                        {"data_wait_s", interval.dataWait},
                        {"compute_s", interval.compute},
                        {"comm_s", interval.comm},
                        {"exposed_comm_s", interval.exposed},
                        {"bytes_sent_per_step", interval.bytes},
                        {"elapsed_s", elapsed},
                        {"eta_s", eta}};
  record.update(extra);
  write(record);
  interval = {};
}

void RunLog::evaluation(const TrainSummary& summary, const char* type, const RunPosition& at, int64_t skipped,
                        nlohmann::json extra) {
  const bool validation = extra.contains("split") && extra["split"] == "validation";
  spdlog::info("{} epoch {}/{} step {}/{}: {} {}", type, at.displayEpoch(), at.epochs(), at.step, at.totalSteps,
               validation ? "validation" : "test",
               summary.segmentation
                   ? fmt::format("mIoU {:.2f}% pixel accuracy {:.2f}%", 100 * summary.miou, 100 * summary.pixelAccuracy)
                   : fmt::format("top-1 {:.2f}% top-5 {:.2f}% loss {:.4f}", 100 * summary.top1, 100 * summary.top5,
                                 summary.loss));
  nlohmann::json record{{"type", type},
                        {"epoch", at.epoch},
                        {"step", at.step},
                        {"top1", summary.top1},
                        {"top5", summary.top5},
                        {"loss", metricValue(summary.loss)},
                        {"miou", summary.miou},
                        {"diverged", summary.diverged},
                        {"pixel_accuracy", summary.pixelAccuracy},
                        {"skipped_steps", skipped},
                        {"seconds", summary.seconds}};
  record.update(extra);
  write(record);
}

}  // namespace aps::train
