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
constexpr const char* kFormatVersion = "1";

uint32_t checksumOf(const NamedTensors& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
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

NamedTensors Checkpoint::section(const std::string& prefix) const {
  NamedTensors out;
  const std::string p = prefix + ".";
  for (const auto& entry : tensors) {
    if (entry.name.compare(0, p.size(), p) == 0) out.push_back({entry.name.substr(p.size()), entry.tensor});
  }
  return out;
}

void Checkpoint::addSection(const std::string& prefix, const NamedTensors& entries) {
  for (const auto& entry : entries) tensors.push_back({prefix + "." + entry.name, entry.tensor});
}

void saveCheckpoint(const std::string& path, const Checkpoint& c) {
  const auto dir = std::filesystem::path(path).parent_path();
  APS_CHECK(dir.empty() || std::filesystem::is_directory(dir), "cannot write checkpoint '{}': no directory '{}'", path,
            dir.string());
  const std::map<std::string, std::string> meta{
      {kFormatKey, kFormatVersion},
      {"config_hash", fmt::format("{:016x}", c.configHash)},
      {"model", c.modelName},
      {"epoch", std::to_string(c.epoch)},
      {"batch_in_epoch", std::to_string(c.batchInEpoch)},
      {"global_step", std::to_string(c.globalStep)},
      {"crc32", std::to_string(checksumOf(c.tensors))},
  };
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
  APS_CHECK(format->second == kFormatVersion, "checkpoint '{}' has format version {}, this aps reads {}", path,
            format->second, kFormatVersion);
  Checkpoint c;
  c.tensors = std::move(contents.tensors);
  const auto crc = static_cast<uint64_t>(parseInt(meta, "crc32", path));
  APS_CHECK(crc == checksumOf(c.tensors), "checkpoint '{}' is corrupt: checksum mismatch", path);
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
  return c;
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

void pruneCheckpoints(const std::string& dir, int64_t keep) {
  auto all = listCheckpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) std::filesystem::remove(all[i]);
  // A run killed while writing leaves its temporary file ("<checkpoint>.tmp.<pid>") behind;
  // the checkpoint it was writing never appeared. Remove those of processes that are gone.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto tmp = name.find(".safetensors.tmp.");
    if (!name.starts_with("checkpoint-") || tmp == std::string::npos) continue;
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
