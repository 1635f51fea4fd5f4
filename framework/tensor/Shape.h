#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace aps {

using Shape = std::vector<int64_t>;

// "[2, 3]": how shapes appear in every error message.
std::string formatShape(std::span<const int64_t> shape);
// Product of the sizes (1 for a 0-d shape); throws aps::Error on a negative size.
int64_t shapeNumel(std::span<const int64_t> shape);
// Row-major strides (in elements) of a contiguous tensor of this shape.
Shape contiguousStrides(std::span<const int64_t> shape);
// Maps a possibly negative dim into [0, rank); throws aps::Error naming `op` otherwise.
int64_t normalizeDim(int64_t dim, int64_t rank, const char* op);

}  // namespace aps
