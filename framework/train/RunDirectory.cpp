#include "framework/train/RunDirectory.h"

#include "comm/SmallAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/io/AtomicFile.h"
#include "framework/train/Checkpoint.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace aps::train {

namespace {

namespace fs = std::filesystem;

// Rank 0's string, on every rank (at most 4095 bytes).
std::string shareFromRankZero(comm::Transport& transport, const std::string& mine) {
  std::array<char, 4096> buffer{};
  APS_CHECK(mine.size() < buffer.size(), "run directory name of {} bytes is too long", mine.size());
  std::memcpy(buffer.data(), mine.data(), mine.size());
  comm::broadcastFromRankZero(transport, buffer.data(), buffer.size());
  return std::string(buffer.data());
}

std::string configStem(const TrainConfig& config) {
  const std::string stem = fs::path(config.sourceFile).stem().string();
  return stem.empty() ? "run" : stem;
}

// runs/<stem>-<UTC time>, or with -2, -3, ... when that folder exists (two runs in one second).
std::string freshRunFolder(const TrainConfig& config, bool create) {
  const std::string base = fmt::format("runs/{}-{:%Y%m%d-%H%M%S}", configStem(config), fmt::gmtime(std::time(nullptr)));
  for (int k = 1;; ++k) {
    const std::string candidate = k == 1 ? base : fmt::format("{}-{}", base, k);
    std::error_code ec;
    if (!create) {
      if (!fs::exists(candidate, ec)) return candidate;
      continue;
    }
    fs::create_directories(fs::path(candidate).parent_path(), ec);
    if (fs::create_directory(candidate, ec)) return candidate;  // atomic: one winner per name
    APS_CHECK(!ec || ec == std::errc::file_exists, "cannot create the run directory '{}': {}", candidate, ec.message());
  }
}

void setDefault(std::string& field, YAML::Node node, const std::string& value) {
  if (!field.empty()) return;
  field = value;
  node = value;
}

}  // namespace

RunDirectory RunDirectory::resolve(TrainConfig& config, comm::Transport& transport, bool create) {
  RunDirectory run;
  if (config.outputDir == "none") return run;
  const bool root = transport.isLocal(0);
  std::string dir = config.outputDir;
  if (dir.empty()) dir = shareFromRankZero(transport, root ? freshRunFolder(config, create) : std::string());
  if (create && root) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    APS_CHECK(!ec && fs::is_directory(dir), "output_dir '{}' cannot be created: {}", dir,
              ec ? ec.message() : "a file of that name exists");
  }
  run.dir = dir;
  config.outputDir = dir;
  config.resolved["output_dir"] = dir;
  setDefault(config.checkpoint.dir, config.resolved["checkpoint"]["dir"], (fs::path(dir) / "checkpoints").string());
  setDefault(config.logging.metricsFile, config.resolved["logging"]["metrics_file"],
             (fs::path(dir) / "metrics.jsonl").string());
  setDefault(config.logging.tensorboardDir, config.resolved["logging"]["tensorboard_dir"],
             (fs::path(dir) / "tensorboard").string());
  return run;
}

void RunDirectory::writeConfigAndOpenLog(const TrainConfig& config) const {
  if (dir.empty()) return;
  const std::string text = fmt::format("# resolved by aps_train from {}\n{}", config.sourceFile, configToYaml(config));
  io::writeFileAtomically((fs::path(dir) / "config.yaml").string(),
                          [&](std::FILE* f) { return std::fwrite(text.data(), 1, text.size(), f) == text.size(); });
  addLogFile((fs::path(dir) / "train.log").string());
  spdlog::info("run directory {}", dir);
}

std::string RunDirectory::newestCheckpoint(const TrainConfig& config, comm::Transport& transport) {
  std::string found;
  if (transport.isLocal(0) && !config.checkpoint.dir.empty()) {
    const auto all = listCheckpoints(config.checkpoint.dir);
    for (auto it = all.rbegin(); it != all.rend() && found.empty(); ++it) {
      try {
        loadCheckpoint(*it);
        found = *it;
      } catch (const Error& e) {
        spdlog::warn("--resume auto: skipping {}", e.what());
      }
    }
  }
  return shareFromRankZero(transport, found);
}

}  // namespace aps::train
