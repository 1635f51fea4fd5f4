#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/train/Config.h"
#include "framework/train/EvalMetrics.h"

#include <memory>
#include <string>

namespace aps::comm {
class Communicator;
}

namespace aps::train {

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

  // Validates everything a run would touch before its first step (datasets readable, model
  // known, formats valid, memory, checkpoint and metrics paths writable, the checkpoint dir not
  // another run's, and `resumeFrom` readable and belonging to this run) without training:
  // --dry-run.
  void dryRun(const std::string& resumeFrom = "");

  // --eval-only: the test metrics of the weights of `resumeFrom` (a checkpoint, or auto), or of
  // model.init_from when it is empty, without training; written as a "final" record with
  // "eval_only": true. Throws aps::Error when there are no trained weights to evaluate.
  TrainSummary evaluateOnly(const std::string& resumeFrom = "");

  // The model's parameters and buffers as they are now (tests compare runs with them).
  NamedTensors modelState() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace aps::train
