#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace aps {

// A user or input error: a bad config, a wrong shape, a truncated file. Tools catch it,
// print what() and exit non-zero. Internal invariants use APS_ASSERT (abort) instead.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] void throwCheckFailed(const char* file, int line, const char* condition, const std::string& message);
[[noreturn]] void assertFailed(const char* file, int line, const char* condition);

inline std::string checkMessage() { return {}; }
template <typename... Args>
std::string checkMessage(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace aps

// APS_CHECK(cond, "format {}", args...): throws aps::Error("file:line: message") when cond is false.
#define APS_CHECK(cond, ...)                                                                                  \
  do {                                                                                                        \
    if (!(cond)) [[unlikely]] {                                                                               \
      ::aps::detail::throwCheckFailed(__FILE__, __LINE__, #cond, ::aps::detail::checkMessage(__VA_ARGS__));   \
    }                                                                                                         \
  } while (0)

// APS_FAIL("format {}", args...): throws aps::Error unconditionally.
#define APS_FAIL(...) ::aps::detail::throwCheckFailed(__FILE__, __LINE__, nullptr, ::aps::detail::checkMessage(__VA_ARGS__))

// APS_ASSERT(cond): an internal invariant; a violation is a bug, so the process aborts.
#define APS_ASSERT(cond)                                          \
  do {                                                            \
    if (!(cond)) [[unlikely]] {                                   \
      ::aps::detail::assertFailed(__FILE__, __LINE__, #cond);     \
    }                                                             \
  } while (0)
