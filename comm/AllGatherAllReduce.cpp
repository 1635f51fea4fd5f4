#include "comm/AllGatherAllReduce.h"

#include "framework/core/Error.h"

#include <cstring>

namespace aps::comm {

namespace {
enum Slot { kEncoded = 0, kGathered = 1, kSum = 2 };
}  // namespace

RankOrderSum::Mode AllGatherAllReduce::sumMode(bool roundEveryAdd, bool kahan) {
  if (!roundEveryAdd) return RankOrderSum::Mode::Fp32;
  return kahan ? RankOrderSum::Mode::Kahan : RankOrderSum::Mode::RoundEveryAdd;
}

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
    if (n > 0) codec.encode(data[i], n, enc[i], s.encodeContext(first + static_cast<int>(i), kEncodeInputPhase, 0));
    s.observeEncode(codec, EncodeObserver::Site::Input, 0, n, data[i], enc[i]);
  }
  uint8_t* gathered = s.scratch(kGathered, 0, bytes * w);
  std::vector<size_t> counts(w, bytes), offsets(w);
  for (size_t r = 0; r < w; ++r) offsets[r] = r * bytes;
  s.allGatherShared(encPtr, counts, offsets, gathered);
  if (n == 0) return;

  // Every rank computes the same function of the same gathered bytes; simulated ranks
  // compute it once and copy.
  // The fp32 sum accumulates in the result's buffer, a rounded one's encoding in scratch (both
  // device memory over device buffers).
  const RankOrderSum::Mode mode = sumMode(roundEveryAdd_, kahan_);
  RankOrderSum sum(codec, mode, s.baseContext(), kSumPhase);
  if (mode == RankOrderSum::Mode::Fp32) {
    sum.resetInto(n, data[0]);
  } else if (mode == RankOrderSum::Mode::RoundEveryAdd) {
    sum.resetEncodedInto(n, s.scratch(kSum, 0, bytes));
  } else {
    sum.reset(n);
  }
  for (size_t k = 0; k < w; ++k) sum.add(gathered + k * bytes);
  sum.result(data[0]);
  s.copyResultToLocalRanks(data, n);
}

}  // namespace aps::comm
