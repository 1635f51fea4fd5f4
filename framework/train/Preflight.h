#pragma once

#include "data/Dataset.h"
#include "framework/tensor/NamedTensor.h"
#include "framework/train/Config.h"

namespace aps::train {

// What a run checks before its first step, so that it fails at once with the keys or paths
// to change instead of after an epoch of training.

// Refuses (aps::Error naming comm.world_size, data.batch_size and data.prefetch) a run whose
// per-rank buffers cannot fit in memory (physical memory, or RLIMIT_AS when lower).
void checkMemoryFits(const TrainConfig& config, const NamedTensors& params, const data::SampleShape& shape,
                     int localRanks, bool simulated);

// A fresh run (not `resuming`) refuses a checkpoint.dir holding another run's checkpoints
// unless checkpoint.overwrite; with `deleteOld` the root rank then deletes them (and the
// temporary files killed writers left).
void claimCheckpointDir(const TrainConfig& config, bool resuming, bool deleteOld, bool root);

// checkpoint.dir and the metrics file's folder exist (created if missing) and are writable;
// with create = false (a dry run) a missing folder is only checked to be creatable.
void checkOutputsWritable(const TrainConfig& config, bool create = true);

}  // namespace aps::train
