#include "framework/tensor/DType.h"

#include "framework/core/Error.h"

namespace aps {

std::string_view dtypeName(DType t) {
  const std::string_view name = kDTypeNames.name(t);
  return name == "?" ? "unknown" : name;
}

DType parseDType(std::string_view name) {
  if (const auto type = kDTypeNames.find(name)) return *type;
  APS_FAIL("unknown dtype '{}' (expected {})", name, kDTypeNames.list());
}

}  // namespace aps
