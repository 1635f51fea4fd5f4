#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace aps {

// Rank-aware logging on spdlog. By default only rank 0 logs; with allRanks every rank logs
// and lines carry a "[rank k]" prefix. Use spdlog::info/warn/... after calling this.
void initLogging(int rank, bool allRanks = false, spdlog::level::level_enum level = spdlog::level::info);

// Keeps the default logger's lines in memory (the last 256) until addLogFile opens a file,
// which then starts with them; initLogging does this itself. A tool calls it first thing so
// that lines logged before initLogging (reading the config) reach the file too.
void captureEarlyLog();

// Adds `path` (appended to) as a second destination of the default logger's lines, in the
// same format; throws aps::Error naming the file when it cannot be opened.
void addLogFile(const std::string& path);

// Parses "trace|debug|info|warn|error|off"; throws aps::Error naming the value otherwise.
spdlog::level::level_enum parseLogLevel(const std::string& name);

}  // namespace aps
