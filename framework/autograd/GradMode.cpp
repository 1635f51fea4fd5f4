#include "framework/autograd/GradMode.h"

namespace aps::autograd {

namespace {
thread_local bool tGradEnabled = true;
}

bool GradMode::isEnabled() { return tGradEnabled; }
void GradMode::setEnabled(bool enabled) { tGradEnabled = enabled; }

}  // namespace aps::autograd
