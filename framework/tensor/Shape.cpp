#include "framework/tensor/Shape.h"

#include "framework/core/Error.h"

#include <fmt/ranges.h>

namespace aps {

std::string formatShape(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shapeNumel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    APS_CHECK(s >= 0, "shape {} has a negative size", formatShape(shape));
    n *= s;
  }
  return n;
}

Shape contiguousStrides(std::span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t normalizeDim(int64_t dim, int64_t rank, const char* op) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  APS_CHECK(d >= 0 && d < rank, "{}: dim {} is out of range for a tensor of rank {}", op, dim, rank);
  return d;
}

}  // namespace aps
