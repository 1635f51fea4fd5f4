#pragma once

#include <string>
#include <string_view>

namespace aps {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool isCpu() const { return type == DeviceType::CPU; }
  bool isCuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
};

// "cpu", "cuda", "cuda:1"
std::string deviceName(Device d);
// Inverse of deviceName; throws aps::Error naming the value when malformed.
Device parseDevice(std::string_view name);

}  // namespace aps
