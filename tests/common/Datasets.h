#pragma once

// Tests that need Fashion-MNIST (Debian's dataset-fashion-mnist): they skip where it is not
// installed, and fail instead when APS_TESTS_REQUIRE_DATA=1 (tools/run-tests.sh sets it: the
// install step provides the dataset, so a skip there means a broken install, not a pass).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace aps::testsupport {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

inline bool haveFashionMnist() { return std::filesystem::exists(kFashionMnistDir); }

inline bool datasetsRequired() {
  const char* v = std::getenv("APS_TESTS_REQUIRE_DATA");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace aps::testsupport

// In a test body or SetUp: skip (or fail under APS_TESTS_REQUIRE_DATA=1) without Fashion-MNIST.
#define APS_REQUIRE_FASHION_MNIST()                                                          \
  do {                                                                                       \
    if (!::aps::testsupport::haveFashionMnist()) {                                           \
      if (::aps::testsupport::datasetsRequired()) {                                          \
        FAIL() << "Fashion-MNIST is not installed but APS_TESTS_REQUIRE_DATA=1 "             \
                  "(apt-get install dataset-fashion-mnist, or run tools/install-deps.sh)";   \
      }                                                                                      \
      GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; \
    }                                                                                        \
  } while (0)
