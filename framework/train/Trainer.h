#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/train/Config.h"

#include <memory>
#include <string>

namespace aps::comm {
class Communicator;
}

namespace aps::train {

// What a run ends with (the test metrics of the final evaluation).
struct TrainSummary {
  bool segmentation = false;
  double top1 = 0, top5 = 0, loss = 0;  // classification (fractions)
  double miou = 0, pixelAccuracy = 0;   // segmentation (fractions)
  int64_t steps = 0, skippedSteps = 0;
  double seconds = 0;
};

// The data-parallel training loop (framework/train): model, data, precision and comm put
// together from a TrainConfig. With comm.backend = mpi every process is one rank of
// `communicator`; with sim one process runs comm.world_size virtual ranks, each on the data
// shard and with the arithmetic a real rank would have, so both give the same bits.
class Trainer {
 public:
  // `communicator`: the MPI world for the mpi backend (null: a world of one); ignored by sim.
  Trainer(TrainConfig config, std::shared_ptr<comm::Communicator> communicator);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (resuming from `resumeFrom` when not empty), evaluates, writes the final
  // weights; returns the final test metrics.
  TrainSummary run(const std::string& resumeFrom = "");

  // Validates everything a run needs (datasets readable, model known, formats valid) without
  // training: --dry-run.
  void dryRun();

  // The model's parameters and buffers as they are now (tests compare runs with them).
  NamedTensors modelState() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace aps::train
