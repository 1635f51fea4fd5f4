#pragma once

#include "comm/Transport.h"

#include <csignal>

namespace aps::train {

// Preemption as batch systems announce it: SIGTERM (Slurm, Kubernetes, `kill`) or SIGUSR1
// (Slurm's `--signal=USR1@T`, forwarded by mpirun) asks the run to stop. While a watch lives
// the signals only set a flag; after every step the ranks agree (a MAX over all of them) so
// that every rank stops after the same step, writes the checkpoint and leaves with
// kPreemptedExitCode. Restores the previous handlers when destroyed.
class PreemptionWatch {
 public:
  PreemptionWatch();
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  // The signal some rank received (0: none). Collective over `transport`: call it on every
  // rank at the same point of every step.
  int agreedSignal(comm::Transport& transport) const;

  // EX_TEMPFAIL: "try again later"; a requeued job resumes with --resume auto.
  static constexpr int kPreemptedExitCode = 75;

 private:
  struct sigaction previousTerm_ {};
  struct sigaction previousUsr1_ {};
};

}  // namespace aps::train
