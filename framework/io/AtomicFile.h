#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace aps::io {

// Writes `path` atomically: `write` fills a temporary file "<path>.tmp.<pid>" in the same
// folder (returning false on a failed write), which is then flushed, fsync'ed and renamed over
// `path`, so a crash never leaves a half-written file and the previous `path` stays intact.
// On failure the temporary file is removed and aps::Error names `path` and the reason.
void writeFileAtomically(const std::string& path, const std::function<bool(std::FILE*)>& write);

}  // namespace aps::io
