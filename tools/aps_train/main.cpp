// aps_train: data-parallel training from a YAML config. Under mpirun every process is a rank
// (comm.backend: mpi); with comm: {backend: sim, world_size: N} one process simulates N ranks.
#include "comm/MpiCommunicator.h"
#include "framework/core/Error.h"
#include "framework/core/Logging.h"
#include "framework/train/Config.h"
#include "framework/train/ConfigSchema.h"
#include "framework/train/Trainer.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"Trains a model data-parallel with low-precision gradient communication", "aps_train"};
  std::string configPath, resume;
  std::vector<std::string> overrides;
  bool printConfig = false, dryRun = false, evalOnly = false;
  std::string helpKey;
  auto* helpConfig = app.add_option("--help-config", helpKey,
                                    "print every config key (or those of KEY, a key or a section) with its type, "
                                    "default, range and help, and exit")
                         ->expected(0, 1);
  auto* configOption = app.add_option("--config", configPath, "experiment YAML file (required unless --help-config)");
  // --config is required unless the keys are asked for: a usage error (exit 2) like any other.
  app.parse_complete_callback([&] {
    if (helpConfig->count() == 0 && configOption->count() == 0) throw CLI::RequiredError("--config");
  });
  app.add_option("--set", overrides, "override a key: --set optimizer.lr=0.2 (repeatable)");
  app.add_option("--resume", resume,
                 "checkpoint to continue from, or auto: the newest valid checkpoint of the run directory "
                 "(output_dir), a fresh start when there is none")
      ->check([](const std::string& value) {
        return value.empty() ? std::string("needs a checkpoint file, got an empty name") : std::string();
      });
  app.add_flag("--print-config", printConfig, "print the resolved config with every default and exit");
  app.add_flag("--dry-run", dryRun, "check the config, data, model and formats, then exit without training");
  app.add_flag("--eval-only", evalOnly,
               "evaluate the weights of --resume CHECKPOINT (or auto), or of model.init_from, on the test set; "
               "train nothing");
  int preempted = 0;
  const int rc = aps::runTool(app, argc, argv, [&] {
    if (helpConfig->count() > 0) {
      fmt::print("{}", aps::train::describeConfigKeys(helpKey));
      return;
    }
    aps::captureEarlyLog();  // the lines before the run directory exists reach its train.log too
    const auto config = aps::train::loadConfig(configPath, overrides);
    if (printConfig) {
      fmt::print("{}", aps::train::configToYaml(config));
      return;
    }
    std::shared_ptr<aps::comm::Communicator> communicator;
    if (config.comm.backend == "mpi" || config.comm.backend == "nccl")
      communicator = std::make_shared<aps::comm::MpiCommunicator>();
    try {
      aps::train::Trainer trainer(config, communicator);
      if (dryRun) {
        trainer.dryRun(resume);
        return;
      }
      const auto s = evalOnly ? trainer.evaluateOnly(resume) : trainer.run(resume);
      if (s.preemptedBy != 0) preempted = aps::kPreempted;
      if (communicator && communicator->rank() != 0) return;
      if (s.preemptedBy != 0) {
        fmt::print("preempted: signal {} after step {}; checkpoint written, exit {}: continue with --resume auto\n",
                   s.preemptedBy, s.steps, aps::kPreempted);
        return;
      }
      // A diverged run says so on the line scripts read.
      std::string note = s.diverged ? " DIVERGED: a loss, or the last step's gradients, were not finite" : "";
      if (s.earlyStopped) note += " (stopped early: eval.early_stopping)";
      if (s.segmentation) {
        fmt::print("final: test mIoU {:.2f}% pixel accuracy {:.2f}% ({} steps, {} skipped, {:.0f} s){}\n", 100 * s.miou,
                   100 * s.pixelAccuracy, s.steps, s.skippedSteps, s.seconds, note);
      } else {
        // A NaN's sign bit depends on the order the kernels met it in: print it as plain nan.
        const double loss = std::isnan(s.loss) ? std::fabs(s.loss) : s.loss;
        fmt::print("final: test top-1 {:.2f}% top-5 {:.2f}% loss {:.4f} ({} steps, {} skipped, {:.0f} s){}\n",
                   100 * s.top1, 100 * s.top5, loss, s.steps, s.skippedSteps, s.seconds, note);
      }
    } catch (const std::exception& e) {
      // One failing rank must not leave the others waiting in a collective.
      if (communicator && communicator->size() > 1) {
        std::fprintf(stderr, "aps_train: error on rank %d: %s\n", communicator->rank(), e.what());
        communicator->abort(e.what());
      }
      throw;
    }
  });
  return rc != 0 ? rc : preempted;
}
