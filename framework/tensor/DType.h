#pragma once

#include "framework/core/EnumNames.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace aps {

// Storage element types. float32 is the compute type on the CPU; the 16-bit floats are
// storage (and wire) formats whose arithmetic is emulated by the precision module.
enum class DType : uint8_t { Float32, Float16, BFloat16, UInt8, Int32, Int64 };
inline constexpr EnumNames<DType, 6> kDTypeNames{{"float32", "float16", "bfloat16", "uint8", "int32", "int64"}};
static_assert(kDTypeNames.covers(DType::Int64), "one name per DType");

constexpr size_t dtypeSize(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::UInt8:
      return 1;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
  }
  return 0;
}

// "float32", "float16", ... (the names safetensors uses are in io/).
std::string_view dtypeName(DType t);

// Inverse of dtypeName; throws aps::Error naming the value when unknown.
DType parseDType(std::string_view name);

}  // namespace aps
