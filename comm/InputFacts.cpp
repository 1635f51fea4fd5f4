#include "comm/InputFacts.h"

#include "framework/core/Parallel.h"
#include "precision/ApsScaler.h"

#include <algorithm>

namespace aps::comm {

void applyInputShifts(std::span<float* const> data, std::span<const InputShift> shifts) {
  if (shifts.empty()) return;
  parallelFor(static_cast<int64_t>(data.size()), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i)
      for (const InputShift& s : shifts)
        if (s.shift != 0) precision::scaleByPowerOfTwo(data[i] + s.begin, s.length, s.shift);
  });
}

const float* shiftedInputs(std::span<const InputShift> shifts, int64_t begin, int64_t n, const float* in, float* out) {
  bool any = false;
  forEachShiftRun(shifts, begin, n, [&](int64_t, int64_t, int shift) { any = any || shift != 0; });
  if (!any) return in;
  forEachShiftRun(shifts, begin, n, [&](int64_t lo, int64_t hi, int shift) {
    precision::scaleByPowerOfTwo(in + (lo - begin), out + (lo - begin), hi - lo, shift);  // shift 0: a copy
  });
  return out;
}

}  // namespace aps::comm
