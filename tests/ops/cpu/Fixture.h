#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aps::test {

// A PyTorch reference fixture written by tools/fixtures/make_kernel_fixtures.py: named
// float32 and int64 tensors (see the script for the file format).
class Fixture {
 public:
  // Reads tests/fixtures/ops/<name>.bin; throws aps::Error naming the file when it is
  // missing or malformed.
  explicit Fixture(const std::string& name);

  bool has(const std::string& key) const { return floats_.count(key) + ints_.count(key) > 0; }
  const std::vector<float>& floats(const std::string& key) const;
  const std::vector<int64_t>& ints(const std::string& key) const;

 private:
  std::string path_;
  std::map<std::string, std::vector<float>> floats_;
  std::map<std::string, std::vector<int64_t>> ints_;
};

// max |actual - expected| / max(max |expected|, 1e-6): the error relative to the
// reference's largest magnitude.
double maxRelativeError(const float* actual, const std::vector<float>& expected);

}  // namespace aps::test
