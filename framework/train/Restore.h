#pragma once

#include "framework/train/Checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace aps::nn {
class Module;
}
namespace aps::optim {
class Optimizer;
class LrScheduler;
}  // namespace aps::optim

namespace aps::train {

// What a checkpoint must agree with to resume a run.
struct RunIdentity {
  std::string modelName;
  uint64_t resumeHash = 0;  // train::resumeHash of the run's config
  int64_t stepsPerEpoch = 0;
  int64_t totalSteps = 0;
  std::string resumeYaml;  // train::resumeYaml of the run's config (names the keys that differ)
  std::vector<std::string> mayDiffer;  // keys a resume on another world size changes (checkpoint.world_change)
};

// Checks that checkpoint `c` (read from `path`) belongs to this run: the model name, the
// config hash, the position (validatePosition). Throws aps::Error naming the file and field.
void checkBelongsToRun(const Checkpoint& c, const std::string& path, const RunIdentity& run);

// Loads the model, optimizer and schedule sections of `c` after checkBelongsToRun: every
// tensor's name and shape must match (missing, unexpected and mis-shaped keys are listed), the
// optimizer's step count must lie in [0, global_step] and the schedule's step must equal
// global_step. Any error names `path`. The precision section is the trainer's (GradientSync).
void restoreTrainingState(const Checkpoint& c, const std::string& path, const RunIdentity& run, nn::Module& model,
                          optim::Optimizer& optimizer, optim::LrScheduler& scheduler);

}  // namespace aps::train
