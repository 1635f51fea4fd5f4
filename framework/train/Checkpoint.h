#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aps::train {

// A training checkpoint: every tensor the run needs to continue bit-identically (model
// parameters and buffers, optimizer and schedule state, scaler state) plus where it stood.
// Stored as one safetensors file whose metadata carries the position, the config hash and a
// checksum (CRC-32 of the header fields and every tensor's bytes), written atomically (temporary file + rename), so
// a crash at any moment leaves the previous checkpoint intact and readable.
struct Checkpoint {
  NamedTensors tensors;  // "model.<name>", "optimizer.<name>", "schedule.<name>", ...
  uint64_t configHash = 0;
  std::string modelName;
  int64_t epoch = 0;         // the epoch in progress
  int64_t batchInEpoch = 0;  // batches of that epoch already trained
  int64_t globalStep = 0;
  int64_t world = 0;      // the ranks that wrote it (0: written before aps recorded it)
  int64_t rankBatch = 0;  // their per-rank batch (0: not recorded)
  std::string config;     // the run's resume-relevant config as YAML (train::resumeYaml); "" before

  // The tensors whose names start with prefix + ".", with the prefix removed.
  NamedTensors section(const std::string& prefix) const;
  void addSection(const std::string& prefix, const NamedTensors& entries);
};

// Loads section `prefix` of `c`, read from `path`, into `part` (Stateful::loadStateDict); an
// error names the file and the section.
void loadSection(const Checkpoint& c, const std::string& path, const std::string& prefix, Stateful& part);

// Writes `checkpoint` to `path` atomically. Throws aps::Error naming the path when the
// directory is missing or the disk is full; the previous file at `path` stays intact.
void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads and verifies a checkpoint (format, checksum of header and tensors); throws aps::Error
// naming the file and the problem (not a checkpoint, truncated, checksum mismatch).
Checkpoint loadCheckpoint(const std::string& path);

// Checks a checkpoint's position against the run resuming it: 0 <= batch_in_epoch <
// stepsPerEpoch, global_step = epoch * stepsPerEpoch + batch_in_epoch, 0 <= global_step <=
// totalSteps. Throws aps::Error naming the file and the field.
void validatePosition(const Checkpoint& c, const std::string& path, int64_t stepsPerEpoch, int64_t totalSteps);

// The step in a checkpoint file name ("checkpoint-0000000042.safetensors": 42), or -1.
int64_t checkpointStep(const std::string& path);

// "<dir>/checkpoint-<step, 10 digits>.safetensors"
std::string checkpointPath(const std::string& dir, int64_t globalStep);

// The checkpoints in `dir`, oldest first (by step).
std::vector<std::string> listCheckpoints(const std::string& dir);

// Deletes all but the newest `keep` checkpoints at or before step `writtenStep` in `dir` (never
// one after it: those belong to a run resumed from further back), and the temporary files that
// runs killed while writing a checkpoint left behind.
void pruneCheckpoints(const std::string& dir, int64_t keep, int64_t writtenStep);

// Deletes the temporary files ("checkpoint-*.safetensors.tmp.<pid>", "final.safetensors.tmp.<pid>")
// that runs killed while writing left in `dir`, when their process is gone.
void removeStaleTemporaryFiles(const std::string& dir);

}  // namespace aps::train
