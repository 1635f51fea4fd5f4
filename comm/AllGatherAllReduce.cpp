#include "comm/AllGatherAllReduce.h"

#include "framework/core/Error.h"

#include <cstring>

namespace aps::comm {

namespace {
// Rounding steps every rank repeats use rank -1 in their encode context (the same random
// bits everywhere), so all ranks still agree when the codec rounds stochastically.
constexpr int kEveryRank = -1;
constexpr int kEncodeInput = 0;
constexpr int kSumPhase = 1;  // + 4 * k + step for the k-th add
enum Slot { kEncoded = 0, kGathered = 1, kAcc = 2 };
}  // namespace

AllGatherAllReduce::AllGatherAllReduce(std::shared_ptr<const precision::Codec> codec, bool roundEveryAdd, bool kahan)
    : codec_(std::move(codec)), roundEveryAdd_(roundEveryAdd), kahan_(kahan) {
  APS_CHECK(codec_ != nullptr, "comm allgather: needs a codec");
  APS_CHECK(!kahan_ || roundEveryAdd_, "comm allgather: Kahan summation applies only when rounding after every add");
}

std::string AllGatherAllReduce::name() const {
  return std::string("allgather") + (roundEveryAdd_ ? (kahan_ ? "_kahan" : "_rounded") : "_fp32") + "/" +
         codec_->name();
}

void AllGatherAllReduce::reduce(ExchangeSchedule& s, std::span<float* const> data, int64_t n) const {
  const precision::Codec& codec = *codec_;
  const int world = s.worldSize();
  const int first = s.firstLocalRank();
  const auto local = static_cast<size_t>(s.localRankCount());
  const auto w = static_cast<size_t>(world);
  const size_t bytes = encodedSize(codec, n);

  std::vector<uint8_t*> enc(local);
  std::vector<const void*> encPtr(local);
  for (size_t i = 0; i < local; ++i) {
    enc[i] = s.scratch(kEncoded, i, bytes);
    encPtr[i] = enc[i];
    if (n > 0) codec.encode(data[i], n, enc[i], s.encodeContext(first + static_cast<int>(i), kEncodeInput, 0));
  }
  uint8_t* gathered = s.scratch(kGathered, 0, bytes * w);
  std::vector<size_t> counts(w, bytes), offsets(w);
  for (size_t r = 0; r < w; ++r) offsets[r] = r * bytes;
  s.allGatherShared(encPtr, counts, offsets, gathered);
  if (n == 0) return;

  // Every rank computes the same function of the same gathered bytes; simulated ranks
  // compute it once and copy.
  float* out = data[0];
  if (!roundEveryAdd_) {
    codec.decode(gathered, n, out);
    for (size_t k = 1; k < w; ++k) codec.decodeAdd(gathered + k * bytes, n, out);
  } else if (kahan_) {
    sumKahan(s, gathered, bytes, n, out);
  } else {
    sumRoundedEveryAdd(s, gathered, bytes, n, out);
  }
  for (size_t i = 1; i < local; ++i) std::memcpy(data[i], out, static_cast<size_t>(n) * sizeof(float));
}

void AllGatherAllReduce::sumRoundedEveryAdd(ExchangeSchedule& s, const uint8_t* gathered, size_t bytes, int64_t n,
                                            float* out) const {
  uint8_t* acc = s.scratch(kAcc, 0, bytes);
  std::memcpy(acc, gathered, bytes);
  for (int k = 1; k < s.worldSize(); ++k) {
    codec_->decodeAddEncode(acc, gathered + static_cast<size_t>(k) * bytes, n, acc,
                            s.encodeContext(kEveryRank, kSumPhase + 4 * k, 0));
  }
  codec_->decode(acc, n, out);
}

void AllGatherAllReduce::sumKahan(ExchangeSchedule& s, const uint8_t* gathered, size_t bytes, int64_t n,
                                  float* out) const {
  // Kahan (1965) compensated summation with every operation rounded to the wire format, as
  // the APS artifact's optional Kahan mode: y = x - c; t = s + y; c = (t - s) - y; s = t.
  const auto count = static_cast<size_t>(n);
  std::vector<float> sum(count), comp(count, 0.0f), x(count), y(count), t(count);
  std::vector<uint8_t> scratch(bytes);
  int step = 0;
  auto roundToFormat = [&](std::vector<float>& v) {
    codec_->encode(v.data(), n, scratch.data(), s.encodeContext(kEveryRank, kSumPhase + step++, 0));
    codec_->decode(scratch.data(), n, v.data());
  };
  codec_->decode(gathered, n, sum.data());
  for (int k = 1; k < s.worldSize(); ++k) {
    codec_->decode(gathered + static_cast<size_t>(k) * bytes, n, x.data());
    for (size_t i = 0; i < count; ++i) y[i] = x[i] - comp[i];
    roundToFormat(y);
    for (size_t i = 0; i < count; ++i) t[i] = sum[i] + y[i];
    roundToFormat(t);
    for (size_t i = 0; i < count; ++i) comp[i] = t[i] - sum[i];
    roundToFormat(comp);
    for (size_t i = 0; i < count; ++i) comp[i] -= y[i];
    roundToFormat(comp);
    sum.swap(t);
  }
  std::memcpy(out, sum.data(), count * sizeof(float));
}

}  // namespace aps::comm
