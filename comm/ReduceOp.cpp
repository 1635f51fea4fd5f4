#include "comm/ReduceOp.h"

#include "framework/core/Error.h"

namespace aps::comm {

std::string_view reduceOpName(ReduceOp op) { return kReduceOpNames.name(op); }

ReduceOp parseReduceOp(std::string_view name) {
  if (const auto op = kReduceOpNames.find(name)) return *op;
  APS_FAIL("unknown reduce op '{}' (expected {})", name, kReduceOpNames.list());
}

}  // namespace aps::comm
