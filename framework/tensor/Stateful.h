#pragma once

#include "framework/tensor/NamedTensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace aps {

// The one way state persists in aps. Every part whose state a resumed run needs (a module,
// an optimizer, an LR schedule, the loss scaler, an FP8-LM scaler, the evaluation monitor,
// each bucket hook: quantisation statistics and error-feedback residuals, and the wire
// precision as a whole, train::GradientSync) saves it as named tensors and loads it back from
// the same names; a checkpoint (train::Checkpoint) keeps each part's entries under a section
// prefix ("model.", "optimizer.", "precision.", ...). A part owns its names: a new part adds
// entries without touching anyone else's, and a part that finds an entry missing that an
// earlier version did not write keeps its fresh state for it.
//
// Nothing else persists: every random stream is derived from (seed, purpose, epoch or step,
// index) (data/SampleRng.h, precision::EncodeContext), so a resumed run draws the same
// numbers without a saved generator.
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual NamedTensors stateDict() const = 0;
  // Restores what stateDict() saved. Throws aps::Error naming the entry that is missing or
  // malformed; the caller adds where it came from (the checkpoint's file and section).
  virtual void loadStateDict(const NamedTensors& state) = 0;
};

// A 1-d int64 tensor of `values`: how counters and small records are stored.
inline Tensor int64Tensor(const std::vector<int64_t>& values) {
  return Tensor::fromVector(std::span<const int64_t>(values), {static_cast<int64_t>(values.size())});
}

// The values of the int64 entry `name` of `state`; throws aps::Error naming it when it is
// missing or not int64.
std::vector<int64_t> int64Entry(const NamedTensors& state, const std::string& name);

// The entries of `state` whose names start with prefix + ".", with the prefix removed.
NamedTensors withoutPrefix(const NamedTensors& state, const std::string& prefix);

}  // namespace aps
