#include "framework/core/Logging.h"

#include "framework/core/Error.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace aps {

void initLogging(int rank, bool allRanks, spdlog::level::level_enum level) {
  const std::string name = fmt::format("aps-{}", rank);
  spdlog::drop(name);  // initialising again (a second run in one process) replaces the logger
  auto logger = spdlog::stderr_color_mt(name);
  if (allRanks) {
    logger->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
  } else {
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  }
  logger->set_level((allRanks || rank == 0) ? level : spdlog::level::off);
  spdlog::set_default_logger(logger);
}

spdlog::level::level_enum parseLogLevel(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  APS_CHECK(level != spdlog::level::off || name == "off",
            "unknown log level '{}' (expected trace, debug, info, warn, error or off)", name);
  return level;
}

}  // namespace aps
