#include "framework/tensor/DType.h"

#include "framework/core/Error.h"

#include <array>

namespace aps {

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 6> kNames{{{DType::Float32, "float32"},
                                                                    {DType::Float16, "float16"},
                                                                    {DType::BFloat16, "bfloat16"},
                                                                    {DType::UInt8, "uint8"},
                                                                    {DType::Int32, "int32"},
                                                                    {DType::Int64, "int64"}}};
}

std::string_view dtypeName(DType t) {
  for (const auto& [type, name] : kNames) {
    if (type == t) return name;
  }
  return "unknown";
}

DType parseDType(std::string_view name) {
  for (const auto& [type, known] : kNames) {
    if (known == name) return type;
  }
  APS_FAIL("unknown dtype '{}' (expected float32, float16, bfloat16, uint8, int32 or int64)", name);
}

}  // namespace aps
