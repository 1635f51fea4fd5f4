#pragma once

#include <string_view>

namespace aps::comm {

enum class ReduceOp { Sum, Max, Min };

std::string_view reduceOpName(ReduceOp op);
// Inverse of reduceOpName ("sum", "max", "min"); throws aps::Error naming the value otherwise.
ReduceOp parseReduceOp(std::string_view name);

}  // namespace aps::comm
