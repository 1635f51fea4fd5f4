#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aps::data {

// The whole content of a file, gunzipped when it is gzip-compressed (zlib reads plain files
// through unchanged). Throws aps::Error naming the path when the file is missing, unreadable
// or a truncated/corrupt gzip stream.
std::vector<uint8_t> readFileBytes(const std::string& path);

// Throws aps::Error "<what> not found: <path>" (plus `hint` when given) unless path exists.
void requirePath(const std::string& path, const std::string& what, const std::string& hint = {});

}  // namespace aps::data
