#include "framework/io/AtomicFile.h"

#include "framework/core/Error.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace aps::io {

void writeFileAtomically(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  const std::filesystem::path target(path);
  const std::filesystem::path temp = target.string() + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  APS_CHECK(f != nullptr, "{}: cannot open '{}' for writing: {}", path, temp.string(), std::strerror(errno));
  bool ok = write(f);
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int writeErrno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::filesystem::remove(temp);
    APS_FAIL("{}: writing failed: {}", path, std::strerror(writeErrno));
  }
  std::error_code ec;
  std::filesystem::rename(temp, target, ec);
  if (ec) {
    std::filesystem::remove(temp);
    APS_FAIL("{}: cannot rename the temporary file into place: {}", path, ec.message());
  }
}

}  // namespace aps::io
