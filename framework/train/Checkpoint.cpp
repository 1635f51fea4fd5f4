#include "framework/train/Checkpoint.h"

#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"

#include <fmt/format.h>
#include <signal.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

namespace aps::train {

namespace {

constexpr const char* kFormatKey = "aps_checkpoint";
// Version 2: the checksum covers the header (position, model, config hash) as well as the
// tensors. Version 1 checksummed the tensors only, so an edited header went unnoticed.
constexpr const char* kFormatVersion = "2";

// The header fields the checksum covers, in a fixed text form.
std::string headerText(const Checkpoint& c) {
  std::string text = fmt::format("config_hash={:016x};model={};epoch={};batch_in_epoch={};global_step={};",
                                 c.configHash, c.modelName, c.epoch, c.batchInEpoch, c.globalStep);
  if (!c.config.empty()) text += "config=" + c.config + ";";
  if (c.world > 0) text += fmt::format("world_size={};batch_size={};", c.world, c.rankBatch);
  return text;
}

uint32_t checksumOf(const Checkpoint& c) {
  const NamedTensors& tensors = c.tensors;
  const std::string header = headerText(c);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(header.data()), static_cast<uInt>(header.size()));
  for (const auto& [name, tensor] : tensors) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
    const Tensor t = tensor.contiguous();
    const auto* bytes = static_cast<const Bytef*>(t.rawData());
    size_t left = static_cast<size_t>(t.numel()) * dtypeSize(t.dtype());
    while (left > 0) {  // crc32 takes at most 4 GiB per call
      const auto chunk = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
      crc = crc32(crc, bytes, chunk);
      bytes += chunk;
      left -= chunk;
    }
  }
  return static_cast<uint32_t>(crc);
}

int64_t parseInt(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  const auto it = meta.find(key);
  APS_CHECK(it != meta.end(), "checkpoint '{}': metadata has no '{}'", path, key);
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    APS_CHECK(used == it->second.size(), "bad number");
    return v;
  } catch (const std::exception&) {
    APS_FAIL("checkpoint '{}': metadata '{}' = '{}' is not an integer", path, key, it->second);
  }
}

}  // namespace

NamedTensors Checkpoint::section(const std::string& prefix) const { return withoutPrefix(tensors, prefix); }

void loadSection(const Checkpoint& c, const std::string& path, const std::string& prefix, Stateful& part) {
  try {
    part.loadStateDict(c.section(prefix));
  } catch (const Error& e) {
    APS_FAIL("checkpoint '{}', {} section: {}", path, prefix, e.what());
  }
}

void Checkpoint::addSection(const std::string& prefix, const NamedTensors& entries) {
  // A checkpoint holds host tensors: a model trained on a GPU saves the same file as on the CPU.
  for (const auto& entry : entries) tensors.push_back({prefix + "." + entry.name, entry.tensor.to(Device::cpu())});
}

void saveCheckpoint(const std::string& path, const Checkpoint& c) {
  const auto dir = std::filesystem::path(path).parent_path();
  APS_CHECK(dir.empty() || std::filesystem::is_directory(dir), "cannot write checkpoint '{}': no directory '{}'", path,
            dir.string());
  std::map<std::string, std::string> meta{
      {kFormatKey, kFormatVersion},
      {"config_hash", fmt::format("{:016x}", c.configHash)},
      {"model", c.modelName},
      {"epoch", std::to_string(c.epoch)},
      {"batch_in_epoch", std::to_string(c.batchInEpoch)},
      {"global_step", std::to_string(c.globalStep)},
      {"crc32", std::to_string(checksumOf(c))},
  };
  if (!c.config.empty()) meta["config"] = c.config;
  if (c.world > 0) {
    meta["world_size"] = std::to_string(c.world);
    meta["batch_size"] = std::to_string(c.rankBatch);
  }
  try {
    io::saveSafetensors(path, c.tensors, meta);
  } catch (const Error& e) {
    APS_FAIL("cannot write checkpoint '{}' (the previous checkpoint is intact): {}", path, e.what());
  }
}

Checkpoint loadCheckpoint(const std::string& path) {
  APS_CHECK(std::filesystem::exists(path), "checkpoint '{}' does not exist", path);
  io::SafetensorsContents contents;
  try {
    contents = io::loadSafetensors(path);
  } catch (const Error& e) {
    APS_FAIL("checkpoint '{}' is unreadable: {}", path, e.what());
  }
  const auto& meta = contents.metadata;
  const auto format = meta.find(kFormatKey);
  APS_CHECK(format != meta.end(), "'{}' is a safetensors file but not an aps checkpoint (no '{}' metadata)", path,
            kFormatKey);
  APS_CHECK(format->second == kFormatVersion,
            "checkpoint '{}' has format version '{}', this aps reads version {} (version 1 did not checksum its "
            "header; resume it with the aps that wrote it, or start afresh)",
            path, format->second.substr(0, 20), kFormatVersion);
  Checkpoint c;
  c.tensors = std::move(contents.tensors);
  const auto hash = meta.find("config_hash");
  APS_CHECK(hash != meta.end(), "checkpoint '{}': metadata has no 'config_hash'", path);
  const std::string& hex = hash->second;
  const auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), c.configHash, 16);
  APS_CHECK(!hex.empty() && error == std::errc() && end == hex.data() + hex.size(),
            "checkpoint '{}': metadata 'config_hash' = '{}' is not a hexadecimal number", path, hex);
  const auto model = meta.find("model");
  c.modelName = model == meta.end() ? "" : model->second;
  c.epoch = parseInt(meta, "epoch", path);
  c.batchInEpoch = parseInt(meta, "batch_in_epoch", path);
  c.globalStep = parseInt(meta, "global_step", path);
  const auto config = meta.find("config");
  c.config = config == meta.end() ? "" : config->second;
  if (meta.count("world_size") != 0) {  // written since resuming on another world size exists
    c.world = parseInt(meta, "world_size", path);
    c.rankBatch = parseInt(meta, "batch_size", path);
    APS_CHECK(c.world >= 1 && c.rankBatch >= 1, "checkpoint '{}': 'world_size' = {} and 'batch_size' = {} must be >= 1",
              path, c.world, c.rankBatch);
  }
  const int64_t crc = parseInt(meta, "crc32", path);
  APS_CHECK(crc >= 0 && static_cast<uint64_t>(crc) == checksumOf(c),
            "checkpoint '{}' is corrupt: checksum mismatch (its header or tensors were changed after it was written)",
            path);
  return c;
}

void validatePosition(const Checkpoint& c, const std::string& path, int64_t stepsPerEpoch, int64_t totalSteps) {
  APS_CHECK(stepsPerEpoch > 0, "checkpoint '{}': this run has no steps per epoch", path);
  APS_CHECK(c.epoch >= 0, "checkpoint '{}': 'epoch' = {} is negative", path, c.epoch);
  APS_CHECK(c.batchInEpoch >= 0 && c.batchInEpoch < stepsPerEpoch,
            "checkpoint '{}': 'batch_in_epoch' = {} is outside [0, {}) (this run has {} steps per epoch)", path,
            c.batchInEpoch, stepsPerEpoch, stepsPerEpoch);
  APS_CHECK(c.globalStep >= 0, "checkpoint '{}': 'global_step' = {} is negative", path, c.globalStep);
  // epoch * stepsPerEpoch + batch_in_epoch without overflow: epoch is bounded by global_step first.
  APS_CHECK(c.epoch <= c.globalStep / stepsPerEpoch && c.epoch * stepsPerEpoch + c.batchInEpoch == c.globalStep,
            "checkpoint '{}': 'global_step' = {} does not match 'epoch' = {} and 'batch_in_epoch' = {} at {} steps "
            "per epoch",
            path, c.globalStep, c.epoch, c.batchInEpoch, stepsPerEpoch);
  APS_CHECK(c.globalStep <= totalSteps,
            "checkpoint '{}': 'global_step' = {} is beyond this run's {} steps (raise epochs or max_steps to train "
            "further)",
            path, c.globalStep, totalSteps);
}

std::string checkpointPath(const std::string& dir, int64_t globalStep) {
  return (std::filesystem::path(dir) / fmt::format("checkpoint-{:010d}.safetensors", globalStep)).string();
}

std::vector<std::string> listCheckpoints(const std::string& dir) {
  std::vector<std::string> found;
  if (!std::filesystem::is_directory(dir)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("checkpoint-") && name.ends_with(".safetensors") && name.size() == 11 + 10 + 12) {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());  // zero-padded steps sort by name
  return found;
}

int64_t checkpointStep(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  int64_t step = -1;
  const char* digits = name.data() + 11;  // "checkpoint-"
  const auto [end, error] = std::from_chars(digits, digits + 10, step);
  return error == std::errc() && end == digits + 10 ? step : -1;
}

void pruneCheckpoints(const std::string& dir, int64_t keep, int64_t writtenStep) {
  // Only checkpoints at or before the one just written are candidates: a newer one (left by a
  // run resumed from further back) is never deleted, and the new one is always kept.
  std::vector<std::string> older;
  for (const auto& path : listCheckpoints(dir)) {
    const int64_t step = checkpointStep(path);
    if (step >= 0 && step <= writtenStep) older.push_back(path);
  }
  for (size_t i = 0; i + static_cast<size_t>(keep) < older.size(); ++i) std::filesystem::remove(older[i]);
  removeStaleTemporaryFiles(dir);
}

void removeStaleTemporaryFiles(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) return;
  // A run killed while writing leaves its temporary file ("<checkpoint>.tmp.<pid>", or
  // "final.safetensors.tmp.<pid>") behind; the file it was writing never appeared. Remove
  // those of processes that are gone.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto tmp = name.find(".safetensors.tmp.");
    if (!(name.starts_with("checkpoint-") || name.starts_with("final.")) || tmp == std::string::npos) continue;
    const std::string pidText = name.substr(tmp + 17);
    int pid = 0;
    const auto [end, error] = std::from_chars(pidText.data(), pidText.data() + pidText.size(), pid);
    if (error != std::errc() || end != pidText.data() + pidText.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
}

}  // namespace aps::train
