#include "comm/RingAllReduce.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cstring>

namespace aps::comm {

namespace {
// Phase ids for stochastic-rounding streams: the input encode, then one per hop.
constexpr int kEncodeInput = 0;
constexpr int kFirstHop = 1;

enum Slot { kEncoded = 0, kIncoming = 1, kHopSum = 2 };

int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

RingAllReduce::RingAllReduce(std::shared_ptr<const precision::Codec> codec) : codec_(std::move(codec)) {
  APS_CHECK(codec_ != nullptr, "comm ring: needs a codec");
}

std::string RingAllReduce::name() const { return "ring/" + codec_->name(); }

void RingAllReduce::reduce(ExchangeSchedule& s, std::span<float* const> data, int64_t n) const {
  const precision::Codec& codec = *codec_;
  const int world = s.worldSize();
  const int first = s.firstLocalRank();
  const auto local = static_cast<size_t>(s.localRankCount());
  const auto w = static_cast<size_t>(world);

  const auto layout = s.encodedLayout(codec, n);
  const std::vector<size_t>& counts = layout.counts;
  const std::vector<size_t>& offsets = layout.offsets;
  const size_t maxCount = layout.maxCount;

  // Every rank encodes its whole input, chunk by chunk (chunks are self-contained).
  std::vector<uint8_t*> enc(local), incoming(local);
  for (size_t i = 0; i < local; ++i) {
    const int rank = first + static_cast<int>(i);
    enc[i] = s.scratch(kEncoded, i, offsets[w]);
    incoming[i] = s.scratch(kIncoming, i, maxCount);
    for (int c = 0; c < world; ++c) {
      const int64_t len = s.chunkSize(n, c);
      if (len == 0) continue;
      codec.encode(data[i] + s.chunkBegin(n, c), len, enc[i] + offsets[static_cast<size_t>(c)],
                   s.encodeContext(rank, kEncodeInput, s.chunkBegin(n, c)));
      s.observeEncode(codec, EncodeObserver::Site::Input, s.chunkBegin(n, c), len, data[i] + s.chunkBegin(n, c),
                      enc[i] + offsets[static_cast<size_t>(c)]);
    }
  }
  auto chunkOf = [&](int rank, int c) -> uint8_t* {
    return s.isLocal(rank) ? enc[static_cast<size_t>(rank - first)] + offsets[static_cast<size_t>(c)] : nullptr;
  };

  // Reduce-scatter: in hop h rank r sends its partial sum of chunk r-h to r+1, which adds its
  // own contribution. After N-1 hops rank r holds the full sum of chunk r+1.
  for (int hop = 0; hop + 1 < world; ++hop) {
    for (int src = 0; src < world; ++src) {
      const int dst = mod(src + 1, world);
      const int c = mod(src - hop, world);
      void* recvData = s.isLocal(dst) ? incoming[static_cast<size_t>(dst - first)] : nullptr;
      s.add(src, dst, chunkOf(src, c), recvData, counts[static_cast<size_t>(c)]);
    }
    s.flush();
    for (size_t i = 0; i < local; ++i) {
      const int rank = first + static_cast<int>(i);
      const int c = mod(rank - hop - 1, world);
      const int64_t len = s.chunkSize(n, c);
      if (len == 0) continue;
      uint8_t* own = chunkOf(rank, c);
      float* hopSum = nullptr;  // an observer's: the fp32 partial sum this hop re-encodes (decode, decode, add)
      if (s.observing(EncodeObserver::Site::Sum)) {
        hopSum = s.scratchFloats(kHopSum, i, static_cast<size_t>(len));
        codec.decode(incoming[i], len, hopSum);
        codec.decodeAdd(own, len, hopSum);
      }
      codec.decodeAddEncode(incoming[i], own, len, own, s.encodeContext(rank, kFirstHop + hop, s.chunkBegin(n, c)));
      s.observeEncode(codec, EncodeObserver::Site::Sum, s.chunkBegin(n, c), len, hopSum, own);
    }
  }

  // All-gather: in hop h rank r forwards the finished chunk r+1-h to r+1.
  for (int hop = 0; hop + 1 < world; ++hop) {
    for (int src = 0; src < world; ++src) {
      const int dst = mod(src + 1, world);
      const int c = mod(src + 1 - hop, world);
      s.add(src, dst, chunkOf(src, c), chunkOf(dst, c), counts[static_cast<size_t>(c)]);
    }
    s.flush();
  }

  // Every rank now holds the same encoded sums; decode them (once for all simulated ranks).
  for (int c = 0; c < world; ++c) {
    const int64_t len = s.chunkSize(n, c);
    if (len > 0) codec.decode(enc[0] + offsets[static_cast<size_t>(c)], len, data[0] + s.chunkBegin(n, c));
  }
  s.copyResultToLocalRanks(data, n);
}

}  // namespace aps::comm
