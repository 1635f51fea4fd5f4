#include "framework/train/Restore.h"

#include "framework/core/Error.h"
#include "framework/nn/Module.h"
#include "framework/optim/LrScheduler.h"
#include "framework/optim/Optimizer.h"
#include "framework/train/Config.h"
#include "models/Weights.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace aps::train {

namespace {

// The single int64 named `name` in a section, or throws naming the file.
int64_t scalarEntry(const NamedTensors& section, const std::string& prefix, const std::string& name,
                    const std::string& path) {
  const Tensor* t = findTensor(section, name);
  APS_CHECK(t != nullptr, "checkpoint '{}' has no '{}.{}'", path, prefix, name);
  APS_CHECK(t->dtype() == DType::Int64 && t->numel() == 1, "checkpoint '{}': '{}.{}' must be one int64, got {} {}",
            path, prefix, name, dtypeName(t->dtype()), t->shapeString());
  return t->contiguous().data<int64_t>()[0];
}

}  // namespace

void checkBelongsToRun(const Checkpoint& c, const std::string& path, const RunIdentity& run) {
  APS_CHECK(c.modelName == run.modelName, "checkpoint '{}' holds model '{}' but the config trains '{}'", path,
            c.modelName, run.modelName);
  if (!c.config.empty() && !run.resumeYaml.empty()) {
    auto differences = configDifferences(c.config, run.resumeYaml);
    std::erase_if(differences, [&](const std::string& d) {
      return std::any_of(run.mayDiffer.begin(), run.mayDiffer.end(),
                         [&](const std::string& key) { return d.starts_with(key + ":"); });
    });
    APS_CHECK(differences.empty(),
              "checkpoint '{}' was written with a different configuration ({}); resume with the config and --set "
              "overrides it was trained with",
              path, fmt::format("{}", fmt::join(differences, "; ")));
    return validatePosition(c, path, run.stepsPerEpoch, run.totalSteps);
  }
  APS_CHECK(c.configHash == run.resumeHash,
            "checkpoint '{}' was written with a different configuration (hash {:016x}, this run {:016x}); resume "
            "with the config and --set overrides it was trained with",
            path, c.configHash, run.resumeHash);
  validatePosition(c, path, run.stepsPerEpoch, run.totalSteps);
}

void restoreTrainingState(const Checkpoint& c, const std::string& path, const RunIdentity& run, nn::Module& model,
                          optim::Optimizer& optimizer, optim::LrScheduler& scheduler) {
  checkBelongsToRun(c, path, run);
  const NamedTensors optimizerState = c.section("optimizer");
  const NamedTensors scheduleState = c.section("schedule");
  const int64_t optimizerSteps = scalarEntry(optimizerState, "optimizer", "step", path);
  APS_CHECK(optimizerSteps >= 0 && optimizerSteps <= c.globalStep,
            "checkpoint '{}': 'optimizer.step' = {} is outside [0, global_step = {}]", path, optimizerSteps,
            c.globalStep);
  const int64_t scheduleStep = scalarEntry(scheduleState, "schedule", "schedule_step", path);
  APS_CHECK(scheduleStep == c.globalStep, "checkpoint '{}': 'schedule.schedule_step' = {} but 'global_step' = {}", path,
            scheduleStep, c.globalStep);
  if (findTensor(scheduleState, "total_steps") != nullptr) {  // written since the schedule's length is kept
    const int64_t before = scalarEntry(scheduleState, "schedule", "total_steps", path);
    if (before != run.totalSteps) {
      spdlog::warn(
          "resuming '{}' at step {} with {} steps in all where its run had {} (epochs or max_steps changed): "
          "the LR schedule is laid out over {} steps from here on, so the learning rate from step {} differs "
          "from the run that wrote the checkpoint",
          path, c.globalStep, run.totalSteps, before, run.totalSteps, c.globalStep);
    }
  }
  models::loadState(model, c.section("model"), path);
  try {
    optimizer.loadStateDict(optimizerState);
    scheduler.loadStateDict(scheduleState);
  } catch (const Error& e) {
    APS_FAIL("checkpoint '{}': {}", path, e.what());
  }
}

}  // namespace aps::train
