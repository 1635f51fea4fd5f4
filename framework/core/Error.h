#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace aps {

// A user or input error: a bad config, a wrong shape, a truncated file. Tools catch it,
// print what() and exit non-zero. Internal invariants use APS_ASSERT (abort) instead.
// what() is the message for the user (it names their file, key, line or value, never aps's
// own source); where() is the aps source location that raised it ("framework/x.cpp:42"), for
// debug logs and bug reports.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
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

// APS_CHECK(cond, "format {}", args...): throws aps::Error(message) when cond is false; the
// error's where() is "file:line". Without a message the text is "file:line: check failed: cond"
// (an internal check: the location is the only useful thing to report).
#define APS_CHECK(cond, ...)                                                                                \
  do {                                                                                                      \
    if (!(cond)) [[unlikely]] {                                                                             \
      ::aps::detail::throwCheckFailed(__FILE__, __LINE__, #cond, ::aps::detail::checkMessage(__VA_ARGS__)); \
    }                                                                                                       \
  } while (0)

// APS_FAIL("format {}", args...): throws aps::Error unconditionally.
#define APS_FAIL(...) \
  ::aps::detail::throwCheckFailed(__FILE__, __LINE__, nullptr, ::aps::detail::checkMessage(__VA_ARGS__))

// APS_ASSERT(cond): an internal invariant; a violation is a bug, so the process aborts.
#define APS_ASSERT(cond)                                      \
  do {                                                        \
    if (!(cond)) [[unlikely]] {                               \
      ::aps::detail::assertFailed(__FILE__, __LINE__, #cond); \
    }                                                         \
  } while (0)
