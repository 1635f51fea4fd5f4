#include "framework/tensor/Device.h"

#include "framework/core/Error.h"

#include <charconv>

namespace aps {

std::string deviceName(Device d) {
  if (d.isCpu()) return "cpu";
  return d.index == 0 ? std::string("cuda") : fmt::format("cuda:{}", d.index);
}

Device parseDevice(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.starts_with("cuda:")) {
    int index = -1;
    const auto digits = name.substr(5);
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return Device::cuda(index);
  }
  APS_FAIL("unknown device '{}' (expected cpu, cuda or cuda:N)", name);
}

}  // namespace aps
