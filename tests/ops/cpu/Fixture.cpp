#include "tests/ops/cpu/Fixture.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace aps::test {

namespace {

template <typename T>
T readValue(std::ifstream& file, const std::string& path) {
  T value{};
  file.read(reinterpret_cast<char*>(&value), sizeof(T));
  APS_CHECK(file.good(), "fixture {}: truncated", path);
  return value;
}

}  // namespace

Fixture::Fixture(const std::string& name)
    : path_(std::string(APS_SOURCE_DIR) + "/tests/fixtures/ops/" + name + ".bin") {
  std::ifstream file(path_, std::ios::binary);
  APS_CHECK(file.is_open(), "fixture {}: cannot open", path_);
  char magic[8];
  file.read(magic, sizeof(magic));
  APS_CHECK(file.good() && std::memcmp(magic, "APSFIX1\n", 8) == 0, "fixture {}: bad magic", path_);
  const auto count = readValue<uint32_t>(file, path_);
  for (uint32_t t = 0; t < count; ++t) {
    const auto nameLength = readValue<uint32_t>(file, path_);
    std::string key(nameLength, '\0');
    file.read(key.data(), nameLength);
    const auto dtype = readValue<uint32_t>(file, path_);
    const auto rank = readValue<uint32_t>(file, path_);
    int64_t elements = 1;
    for (uint32_t d = 0; d < rank; ++d) elements *= readValue<int64_t>(file, path_);
    APS_CHECK(dtype <= 1 && elements >= 0, "fixture {}: bad header for tensor '{}'", path_, key);
    if (dtype == 0) {
      std::vector<float>& values = floats_[key];
      values.resize(static_cast<size_t>(elements));
      file.read(reinterpret_cast<char*>(values.data()), elements * static_cast<int64_t>(sizeof(float)));
    } else {
      std::vector<int64_t>& values = ints_[key];
      values.resize(static_cast<size_t>(elements));
      file.read(reinterpret_cast<char*>(values.data()), elements * static_cast<int64_t>(sizeof(int64_t)));
    }
    APS_CHECK(file.good(), "fixture {}: truncated tensor '{}'", path_, key);
  }
}

const std::vector<float>& Fixture::floats(const std::string& key) const {
  const auto it = floats_.find(key);
  APS_CHECK(it != floats_.end(), "fixture {}: no float tensor '{}'", path_, key);
  return it->second;
}

const std::vector<int64_t>& Fixture::ints(const std::string& key) const {
  const auto it = ints_.find(key);
  APS_CHECK(it != ints_.end(), "fixture {}: no int64 tensor '{}'", path_, key);
  return it->second;
}

double maxRelativeError(const float* actual, const std::vector<float>& expected) {
  double maxError = 0.0, maxMagnitude = 1e-6;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i];
    const double a = actual[i];
    maxError = std::max(maxError, std::isnan(a) ? INFINITY : std::abs(a - e));
    maxMagnitude = std::max(maxMagnitude, std::abs(e));
  }
  return maxError / maxMagnitude;
}

}  // namespace aps::test
