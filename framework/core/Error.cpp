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
  std::string text = fmt::format("{}:{}: ", shortPath(file), line);
  if (!message.empty()) {
    text += message;
  } else if (condition != nullptr) {
    text += fmt::format("check failed: {}", condition);
  }
  throw Error(text);
}

void assertFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "aps: internal error at %s:%d: assertion failed: %s\n", shortPath(file), line, condition);
  std::abort();
}

}  // namespace aps::detail
