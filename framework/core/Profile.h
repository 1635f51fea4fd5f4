#pragma once

// A per-op time profile of the engine (aps_bench_train --profile, tools/perf/breakdown.py,
// docs/PERFORMANCE.md). Scopes opened around the kernels, the backward engine's nodes and the
// optimizer record their exclusive wall time (the scope's time minus that of scopes opened
// inside it on the same thread) under a name, with the floating-point operations and bytes
// of memory traffic the caller states, so that each entry can be held against the machine's
// peaks. Off by default: a scope then costs one relaxed atomic load and no clock reads.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace aps::profile {

struct Totals {
  double seconds = 0.0;  // exclusive wall time
  int64_t calls = 0;
  double flops = 0.0;
  double bytes = 0.0;
};

void setEnabled(bool on);
bool enabled();
// Forgets everything recorded so far.
void reset();
// What was recorded since the last reset, by name.
std::map<std::string, Totals> totals();

class Scope {
 public:
  // `name` must outlive the scope. flops and bytes describe the work inside it.
  explicit Scope(const char* name, double flops = 0.0, double bytes = 0.0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  double flops_, bytes_;
  bool active_;
  Scope* parent_ = nullptr;
  double childSeconds_ = 0.0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace aps::profile
