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
