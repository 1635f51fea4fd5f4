#include "framework/ops/cuda/Errors.h"

#include "framework/core/Error.h"

namespace aps::cuda {

void throwBadTarget(int64_t target, int64_t position, int64_t classes, int64_t ignoreIndex) {
  APS_FAIL("cross_entropy: target {} at position {} is outside [0, {}) and not the ignore index {}", target, position,
           classes, ignoreIndex);
}

}  // namespace aps::cuda
