#include "comm/InputFacts.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/ApsScaler.h"
#include "precision/cuda/CodecKernels.h"

#include <algorithm>
#include <cstring>

namespace aps::comm {

void readSticky16(const Sticky16Inputs& inputs, size_t i, int64_t begin, int64_t n, float* out) {
  const uint16_t* keys = inputs.keys[i];
  const int64_t end = begin + n;
  int64_t done = begin;
  for (const Sticky16Inputs::Exact& e : inputs.exact[i]) {
    if (e.begin + e.length <= begin) continue;
    if (e.begin >= end) break;
    const int64_t lo = std::max(begin, e.begin), hi = std::min(end, e.begin + e.length);
    if (lo > done) precision::widenSticky16(keys + done, out + (done - begin), lo - done);
    std::memcpy(out + (lo - begin), e.values + (lo - e.begin), static_cast<size_t>(hi - lo) * sizeof(float));
    done = hi;
  }
  if (end > done) precision::widenSticky16(keys + done, out + (done - begin), end - done);
}

void applyInputShifts(std::span<float* const> data, std::span<const InputShift> shifts, Device device) {
  if (shifts.empty()) return;
  if (device.isCuda()) {
    for (float* d : data)
      for (const InputShift& s : shifts)
        precision::cuda::scaleByPowerOfTwo(d + s.begin, s.length, s.shift, cuda::currentStream());
    return;
  }
  parallelFor(static_cast<int64_t>(data.size()), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i)
      for (const InputShift& s : shifts)
        if (s.shift != 0) precision::scaleByPowerOfTwo(data[i] + s.begin, s.length, s.shift);
  });
}

int uniformShift(std::span<const InputShift> shifts, int64_t begin, int64_t n) {
  const int64_t end = begin + n;
  auto s = std::partition_point(shifts.begin(), shifts.end(),
                                [&](const InputShift& x) { return x.begin + x.length <= begin; });
  int shift = 0;
  int64_t covered = 0;
  for (; s != shifts.end() && s->begin < end; ++s) {
    const int64_t lo = std::max(begin, s->begin), hi = std::min(end, s->begin + s->length);
    if (s->shift == 0) continue;
    APS_CHECK(shift == 0 || shift == s->shift, "input shifts {} and {} within the values [{}, {})", shift, s->shift,
              begin, end);
    shift = s->shift;
    covered += hi - lo;
  }
  APS_CHECK(shift == 0 || covered == n, "an input shift {} covers {} of the values [{}, {})", shift, covered, begin,
            end);
  return shift;
}

const float* shiftedInputs(std::span<const InputShift> shifts, int64_t begin, int64_t n, const float* in, float* out) {
  const int64_t end = begin + n;
  // The first shift that ends after `begin` (shifts ascend and do not overlap).
  auto s = std::partition_point(shifts.begin(), shifts.end(),
                                [&](const InputShift& x) { return x.begin + x.length <= begin; });
  bool any = false;
  for (auto t = s; t != shifts.end() && t->begin < end; ++t) any = any || t->shift != 0;
  if (!any) return in;
  int64_t done = begin;  // values before this are in `out`
  for (; s != shifts.end() && s->begin < end; ++s) {
    const int64_t lo = std::max(begin, s->begin), hi = std::min(end, s->begin + s->length);
    if (lo > done)
      std::memcpy(out + (done - begin), in + (done - begin), static_cast<size_t>(lo - done) * sizeof(float));
    precision::scaleByPowerOfTwo(in + (lo - begin), out + (lo - begin), hi - lo, s->shift);
    done = hi;
  }
  if (end > done)
    std::memcpy(out + (done - begin), in + (done - begin), static_cast<size_t>(end - done) * sizeof(float));
  return out;
}

void roundTripSticky16Into(const precision::Codec& codec, const Sticky16Inputs& inputs, size_t i,
                           std::span<const InputShift> shifts, int64_t begin, int64_t n, float* acc, bool add,
                           float* widened, float* scaled, uint8_t* bytes, const precision::EncodeContext& ctx) {
  const uint16_t* keys = inputs.keys[i];
  const std::vector<Sticky16Inputs::Exact>& exact = inputs.exact[i];
  // The first shift and whole copy that end after `begin` (both ascend and do not overlap).
  auto s = std::partition_point(shifts.begin(), shifts.end(),
                                [&](const InputShift& x) { return x.begin + x.length <= begin; });
  auto e = std::partition_point(exact.begin(), exact.end(),
                                [&](const Sticky16Inputs::Exact& x) { return x.begin + x.length <= begin; });
  const int64_t end = begin + n;
  for (int64_t pos = begin; pos < end;) {
    // [pos, stop): one shift (or none) and either keys or one whole copy.
    int shift = 0;
    int64_t stop = end;
    if (s != shifts.end()) {
      if (s->begin <= pos) {
        shift = s->shift;
        stop = std::min(stop, s->begin + s->length);
      } else {
        stop = std::min(stop, s->begin);
      }
    }
    const float* whole = nullptr;
    if (e != exact.end()) {
      if (e->begin <= pos) {
        whole = e->values + (pos - e->begin);
        stop = std::min(stop, e->begin + e->length);
      } else {
        stop = std::min(stop, e->begin);
      }
    }
    const int64_t len = stop - pos;
    float* out = acc + (pos - begin);
    if (len > 0 && (whole != nullptr || !codec.roundTripKeysInto(keys + pos, len, shift, out, add))) {
      const float* in = whole;
      if (in == nullptr) {
        precision::widenSticky16(keys + pos, widened, len);
        in = widened;
      }
      if (shift != 0) {
        precision::scaleByPowerOfTwo(in, scaled, len, shift);
        in = scaled;
      }
      precision::EncodeContext at = ctx;
      at.offset = ctx.offset + (pos - begin);
      codec.roundTripInto(in, len, out, add, bytes, at);
    }
    pos = stop;
    if (s != shifts.end() && s->begin + s->length <= pos) ++s;
    if (e != exact.end() && e->begin + e->length <= pos) ++e;
  }
}

}  // namespace aps::comm
