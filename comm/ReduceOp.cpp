#include "comm/ReduceOp.h"

#include "framework/core/Error.h"

namespace aps::comm {

std::string_view reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

ReduceOp parseReduceOp(std::string_view name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  APS_FAIL("unknown reduce op '{}' (expected sum, max or min)", name);
}

}  // namespace aps::comm
