#include "framework/train/Preflight.h"

#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/train/Checkpoint.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace aps::train {

// Sizes that cannot fit are refused before anything big is allocated, naming the keys that
// set them (a simulated world of 8192 ranks used to end in a bare std::bad_alloc). The estimate
// is a lower bound: per simulated rank three gradient-sized buffers (the rank's fp32 copy,
// its encoded form and the transport's chunks; measured: ResNet-20 at 64 and 256 simulated
// ranks grows by 3.1 MB per rank, 2.9x its 1.09 MB of fp32 gradients), a fourth with error
// feedback, and the loader's queue of batches; shared, the weights, their gradients and up to
// two optimizer moments. The limit is physical memory, or RLIMIT_AS when lower.
void checkMemoryFits(const TrainConfig& config, const NamedTensors& params, const data::SampleShape& shape,
                     int localRanks, bool simulated) {
  double paramCount = 0;
  for (const auto& p : params) paramCount += static_cast<double>(p.tensor.numel());
  double sample = static_cast<double>(shape.image.empty() ? 0 : shape.imageNumel()) * 4.0;
  double labels = 8.0;
  for (int64_t d : shape.label) labels *= static_cast<double>(d);
  sample += labels;
  const double batchBytes = static_cast<double>(config.data.batchSize) * sample;
  const double perRankGrad = paramCount * 4.0 * (config.precision.errorFeedback ? 4.0 : 3.0);
  const double perRankData = batchBytes * static_cast<double>(config.data.prefetch + 1);
  const double shared = paramCount * 4.0 * 4.0;
  const double need = shared + static_cast<double>(localRanks) * (perRankGrad + perRankData);
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  const double pageSize = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (pages <= 0 || pageSize <= 0) return;
  double have = pages * pageSize;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    have = std::min(have, static_cast<double>(limit.rlim_cur));
  }
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  APS_CHECK(need <= have,
            "this run needs at least {:.1f} GiB of memory and the machine has {:.1f} GiB: {} {} x (gradient buffers "
            "{:.1f} MB for {} parameters + data.prefetch = {} batches of data.batch_size = {} samples, {:.1f} MB); "
            "lower {}",
            need / GiB, have / GiB, localRanks, simulated ? "simulated ranks (comm.world_size)" : "rank",
            perRankGrad / 1e6, static_cast<int64_t>(paramCount), config.data.prefetch, config.data.batchSize,
            perRankData / 1e6,
            simulated && localRanks > 1 ? "comm.world_size, data.batch_size or data.prefetch"
                                        : "data.batch_size or data.prefetch");
}

// A fresh run must not write over another run's checkpoints (it would also prune them, or
// have its own pruned by a run that got further): refuse, unless checkpoint.overwrite says to
// delete them first.
void claimCheckpointDir(const TrainConfig& config, bool resuming, bool deleteOld, bool root) {
  const std::string& dir = config.checkpoint.dir;
  if (dir.empty()) return;
  if (deleteOld && root) removeStaleTemporaryFiles(dir);
  if (resuming) return;
  std::vector<std::string> found = listCheckpoints(dir);
  const auto final = std::filesystem::path(dir) / "final.safetensors";
  if (std::filesystem::exists(final)) found.push_back(final.string());
  if (found.empty()) return;
  APS_CHECK(config.checkpoint.overwrite,
            "checkpoint.dir '{}' already holds another run's checkpoints ({}{}); resume it with --resume, choose "
            "another checkpoint.dir, or set checkpoint.overwrite: true to delete them",
            dir, std::filesystem::path(found.back()).filename().string(),
            found.size() > 1 ? fmt::format(" and {} more", found.size() - 1) : "");
  if (!deleteOld || !root) return;
  for (const auto& path : found) std::filesystem::remove(path);
  spdlog::warn("checkpoint.overwrite: deleted {} files of an earlier run in {}", found.size(), dir);
}

// The directories and files a run writes must be writable before its first step, not after
// an epoch of training.
void checkOutputsWritable(const TrainConfig& config, bool create) {
  auto probeDir = [create](const std::filesystem::path& dir, const std::string& key) {
    std::error_code ec;
    if (!create && !std::filesystem::exists(dir, ec)) {  // a dry run: the nearest existing folder must be writable
      std::filesystem::path existing = std::filesystem::absolute(dir, ec);
      while (!std::filesystem::exists(existing, ec) && existing.has_parent_path() && existing != existing.parent_path())
        existing = existing.parent_path();
      APS_CHECK(std::filesystem::is_directory(existing, ec) && ::access(existing.c_str(), W_OK) == 0,
                "{} '{}': cannot be created: '{}' is not a writable directory", key, dir.string(), existing.string());
      return;
    }
    std::filesystem::create_directories(dir, ec);
    APS_CHECK(!ec && std::filesystem::is_directory(dir), "{} '{}': cannot create the directory: {}", key, dir.string(),
              ec ? ec.message() : "a file of that name exists");
    const auto probe = dir / fmt::format(".aps-write-test.{}", ::getpid());
    {
      std::ofstream out(probe);
      APS_CHECK(out.good() && (out << "x").good(), "{} '{}': the directory is not writable", key, dir.string());
    }
    std::filesystem::remove(probe, ec);
  };
  if (!config.checkpoint.dir.empty()) probeDir(config.checkpoint.dir, "checkpoint.dir");
  if (!config.logging.metricsFile.empty()) {
    const auto file = std::filesystem::path(config.logging.metricsFile);
    APS_CHECK(!std::filesystem::is_directory(file), "logging.metrics_file '{}' is a directory", file.string());
    probeDir(file.has_parent_path() ? file.parent_path() : std::filesystem::path("."), "logging.metrics_file");
  }
}

}  // namespace aps::train
