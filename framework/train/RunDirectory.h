#pragma once

#include "comm/Transport.h"
#include "framework/train/Config.h"

#include <string>

namespace aps::train {

// A run's folder (output_dir): the resolved config (config.yaml), the log (train.log), the
// metrics (metrics.jsonl), the checkpoints (checkpoints/, with final.safetensors) and the
// picture of the run. '' picks runs/<config name>-<UTC time>[-k] (rank 0 chooses, every rank
// gets its choice); "none" keeps the older behaviour (files only where checkpoint.dir and
// logging.metrics_file say).
struct RunDirectory {
  std::string dir;  // "" without a run directory

  // Resolves output_dir and fills checkpoint.dir and logging.metrics_file where the config
  // left them empty (in `config` and its resolved tree). `create`: make the folder (a dry run
  // only names it). Collective over `transport`.
  static RunDirectory resolve(TrainConfig& config, comm::Transport& transport, bool create);

  // Rank 0: config.yaml (atomically) and train.log as a second log sink.
  void writeConfigAndOpenLog(const TrainConfig& config) const;

  // The newest checkpoint of the run's checkpoint folder that loads and verifies, or "" when
  // there is none (--resume auto). Rank 0 looks; every rank gets its answer. Collective.
  static std::string newestCheckpoint(const TrainConfig& config, comm::Transport& transport);
};

}  // namespace aps::train
