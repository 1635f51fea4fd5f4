#include "framework/core/Logging.h"

#include "framework/core/Error.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <fstream>

namespace aps {

namespace {
std::string& currentPattern() {
  static std::string pattern = "[%H:%M:%S.%e] [%^%l%$] %v";
  return pattern;
}

// The lines logged before the log file is opened (the launcher, threads, device), kept so
// that addLogFile can write them first: train.log starts where the terminal does.
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt>& earlyLines() {
  static auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  return sink;
}
}  // namespace

void captureEarlyLog() {
  auto& sinks = spdlog::default_logger()->sinks();
  if (std::find(sinks.begin(), sinks.end(), earlyLines()) != sinks.end()) return;
  earlyLines()->set_level(spdlog::level::trace);
  earlyLines()->set_pattern(currentPattern());
  sinks.push_back(earlyLines());
}

void initLogging(int rank, bool allRanks, spdlog::level::level_enum level) {
  const std::string name = fmt::format("aps-{}", rank);
  spdlog::drop(name);  // initialising again (a second run in one process) replaces the logger
  auto logger = spdlog::stderr_color_mt(name);
  currentPattern() = allRanks ? fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank) : "[%H:%M:%S.%e] [%^%l%$] %v";
  logger->set_pattern(currentPattern());
  logger->set_level((allRanks || rank == 0) ? level : spdlog::level::off);
  spdlog::set_default_logger(logger);
  captureEarlyLog();  // until the log file opens
}

void addLogFile(const std::string& path) {
  auto logger = spdlog::default_logger();
  try {
    auto& sinks = logger->sinks();
    const auto early = std::find(sinks.begin(), sinks.end(), earlyLines());
    if (early != sinks.end()) {
      // What was logged before the file opened goes first; a fresh buffer waits for the next run.
      std::ofstream file(path, std::ios::app);
      for (const std::string& line : earlyLines()->last_formatted()) file << line;
      APS_CHECK(file.good(), "cannot write the log file '{}'", path);
      sinks.erase(early);
      earlyLines() = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
    }
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    sinks.push_back(sink);
    logger->set_pattern(currentPattern());  // the file's lines look like the terminal's
  } catch (const spdlog::spdlog_ex& e) {
    APS_FAIL("cannot open the log file '{}': {}", path, e.what());
  }
}

spdlog::level::level_enum parseLogLevel(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  APS_CHECK(level != spdlog::level::off || name == "off",
            "unknown log level '{}' (expected trace, debug, info, warn, error or off)", name);
  return level;
}

}  // namespace aps
