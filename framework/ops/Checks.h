#pragma once

#include "framework/core/Error.h"
#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Argument checks shared by the op front ends; messages name the op, argument and value.
inline void checkFloat(const char* op, const char* arg, const Tensor& t) {
  APS_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  APS_CHECK(t.dtype() == DType::Float32, "{}: {} must be float32, got {} (shape {})", op, arg, dtypeName(t.dtype()),
            t.shapeString());
}

inline void checkRank(const char* op, const char* arg, const Tensor& t, int64_t rank) {
  APS_CHECK(t.dim() == rank, "{}: {} must have {} dims, got shape {}", op, arg, rank, t.shapeString());
}

}  // namespace aps::ops
