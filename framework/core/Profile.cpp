#include "framework/core/Profile.h"

#include <atomic>
#include <mutex>

namespace aps::profile {
namespace {
std::atomic<bool> gEnabled{false};
std::mutex gMutex;
std::map<std::string, Totals>& table() {
  static std::map<std::string, Totals> t;
  return t;
}
thread_local Scope* tCurrent = nullptr;
}  // namespace

void setEnabled(bool on) { gEnabled.store(on, std::memory_order_relaxed); }
bool enabled() { return gEnabled.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(gMutex);
  table().clear();
}

std::map<std::string, Totals> totals() {
  std::lock_guard<std::mutex> lock(gMutex);
  return table();
}

Scope::Scope(const char* name, double flops, double bytes)
    : name_(name), flops_(flops), bytes_(bytes), active_(enabled()) {
  if (!active_) return;
  parent_ = tCurrent;
  tCurrent = this;
  start_ = std::chrono::steady_clock::now();
}

Scope::~Scope() {
  if (!active_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (parent_ != nullptr) parent_->childSeconds_ += elapsed;
  tCurrent = parent_;
  std::lock_guard<std::mutex> lock(gMutex);
  Totals& t = table()[name_];
  t.seconds += elapsed - childSeconds_;
  t.calls += 1;
  t.flops += flops_;
  t.bytes += bytes_;
}

}  // namespace aps::profile
