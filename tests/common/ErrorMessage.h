#pragma once

#include "framework/core/Error.h"

#include <string>

namespace aps::testsupport {

// The message of the aps::Error that fn throws, or "" when it throws none: for tests that
// check what an error message names.
template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const aps::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace aps::testsupport

// EXPECT_ERROR_NAMES(statement, fragment): the statement throws aps::Error whose message
// contains `fragment` (the key, file or value the error is about).
#define EXPECT_ERROR_NAMES(statement, fragment)                                                       \
  do {                                                                                                \
    const std::string apsErrorText_ = ::aps::testsupport::errorOf([&] { (void)(statement); });        \
    EXPECT_FALSE(apsErrorText_.empty()) << #statement " threw no aps::Error";                         \
    EXPECT_NE(apsErrorText_.find(fragment), std::string::npos)                                        \
        << #statement " threw '" << apsErrorText_ << "', which does not name '" << (fragment) << "'"; \
  } while (0)
