#include "framework/core/Logging.h"

#include "framework/core/Error.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace aps {

namespace {
std::string& currentPattern() {
  static std::string pattern = "[%H:%M:%S.%e] [%^%l%$] %v";
  return pattern;
}
}  // namespace

void initLogging(int rank, bool allRanks, spdlog::level::level_enum level) {
  const std::string name = fmt::format("aps-{}", rank);
  spdlog::drop(name);  // initialising again (a second run in one process) replaces the logger
  auto logger = spdlog::stderr_color_mt(name);
  currentPattern() = allRanks ? fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank) : "[%H:%M:%S.%e] [%^%l%$] %v";
  logger->set_pattern(currentPattern());
  logger->set_level((allRanks || rank == 0) ? level : spdlog::level::off);
  spdlog::set_default_logger(logger);
}

void addLogFile(const std::string& path) {
  auto logger = spdlog::default_logger();
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    logger->sinks().push_back(sink);
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
