#include "framework/core/Error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace aps::detail {

namespace {
// Paths are reported relative to the repository so messages are stable across machines.
const char* shortPath(const char* file) {
  for (const char* root : {"/framework/", "/precision/", "/comm/", "/data/", "/models/", "/tools/", "/tests/"}) {
    if (const char* p = std::strstr(file, root)) return p + 1;
  }
  return file;
}
}  // namespace

void throwCheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::string where = fmt::format("{}:{}", shortPath(file), line);
  if (!message.empty()) throw Error(message, std::move(where));
  throw Error(fmt::format("{}: check failed: {}", where, condition != nullptr ? condition : "(no condition)"),
              std::move(where));
}

void assertFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "aps: internal error at %s:%d: assertion failed: %s\n", shortPath(file), line, condition);
  std::abort();
}

}  // namespace aps::detail
