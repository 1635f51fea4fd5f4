#pragma once

namespace aps::autograd {

// Whether ops record history (per thread, like torch.is_grad_enabled()).
class GradMode {
 public:
  static bool isEnabled();
  static void setEnabled(bool enabled);
};

// Disables history recording for its lifetime (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::isEnabled()) { GradMode::setEnabled(false); }
  ~NoGradGuard() { GradMode::setEnabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace aps::autograd
