#pragma once

#include "framework/core/EnumNames.h"

#include <string_view>

namespace aps::comm {

enum class ReduceOp { Sum, Max, Min };
inline constexpr EnumNames<ReduceOp, 3> kReduceOpNames{{"sum", "max", "min"}};
static_assert(kReduceOpNames.covers(ReduceOp::Min), "one name per ReduceOp");

std::string_view reduceOpName(ReduceOp op);
// Inverse of reduceOpName ("sum", "max", "min"); throws aps::Error naming the value otherwise.
ReduceOp parseReduceOp(std::string_view name);

}  // namespace aps::comm
