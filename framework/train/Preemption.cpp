#include "framework/train/Preemption.h"

#include "comm/SmallAllReduce.h"

#include <vector>

namespace aps::train {

namespace {

volatile std::sig_atomic_t gSignal = 0;

extern "C" void onPreemptionSignal(int signal) { gSignal = signal; }

}  // namespace

PreemptionWatch::PreemptionWatch() {
  gSignal = 0;
  struct sigaction action {};
  action.sa_handler = onPreemptionSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &previousTerm_);
  sigaction(SIGUSR1, &action, &previousUsr1_);
}

PreemptionWatch::~PreemptionWatch() {
  sigaction(SIGTERM, &previousTerm_, nullptr);
  sigaction(SIGUSR1, &previousUsr1_, nullptr);
}

int PreemptionWatch::agreedSignal(comm::Transport& transport) const {
  std::vector<float> flags(static_cast<size_t>(transport.localRankCount()), static_cast<float>(gSignal));
  std::vector<float*> data;
  for (float& f : flags) data.push_back(&f);
  comm::smallAllReduce(transport, data, 1, comm::ReduceOp::Max);
  return static_cast<int>(flags[0]);
}

}  // namespace aps::train
