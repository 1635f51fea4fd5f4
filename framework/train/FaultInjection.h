#pragma once

#include "framework/tensor/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace aps::train {

// Faults injected on purpose, for the reliability tests only (tests/train/Reliability*): a
// rank that throws or dies mid-run, and NaN / inf in a chosen gradient. Read once from the
// environment variable APS_FAULT_INJECTION, which is unset in normal runs (then nothing
// happens and nothing is checked). Faults are separated by ';', each "<kind>@rank=R,step=S"
// with optional ",param=P" (the parameter's index in model order) for nan and inf:
//   throw    rank R throws aps::Error at the start of step S (a failing rank)
//   exit     rank R ends at the start of step S with status 3, without cleanup (a dying rank)
//   nan/inf  rank R's gradient of parameter P becomes NaN / +inf in one element at step S
// Ranks are global ranks: under the sim backend, the virtual rank. Steps count from 0.
// Example: APS_FAULT_INJECTION="nan@rank=1,step=3,param=5;throw@rank=0,step=9".
class FaultInjection {
 public:
  enum class Kind { Throw, Exit, NaN, Inf };
  struct Fault {
    Kind kind = Kind::Throw;
    int rank = 0;
    int64_t step = 0;
    int64_t param = 0;
  };

  static constexpr const char* kEnvironmentVariable = "APS_FAULT_INJECTION";

  // Parses the syntax above; throws aps::Error naming the variable and the bad fault.
  static FaultInjection parse(const std::string& spec);
  static FaultInjection fromEnvironment();

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }

  // At the start of a step, for the ranks this process runs: throws or exits as configured.
  void beforeStep(int firstRank, int localRanks, int64_t step) const;
  // In the gradient-ready hook, before the gradient is handed to the reducer: poisons
  // `leaf`'s gradient as configured.
  void poisonGradient(int rank, int64_t step, int64_t param, const Tensor& leaf) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace aps::train
