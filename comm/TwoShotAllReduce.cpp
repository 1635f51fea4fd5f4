#include "comm/TwoShotAllReduce.h"

#include "comm/RankOrderSum.h"
#include "framework/core/Error.h"

#include <cstring>

namespace aps::comm {

namespace {
// Scratch slots.
enum Slot { kSend = 0, kRecv = 1, kSum = 2, kGathered = 3 };
}  // namespace

TwoShotAllReduce::TwoShotAllReduce(std::shared_ptr<const precision::Codec> codec, std::string name)
    : codec_(std::move(codec)), name_(std::move(name)) {
  APS_CHECK(codec_ != nullptr, "comm {}: needs a codec", name_);
}

std::string TwoShotAllReduce::name() const { return name_ + "/" + codec_->name(); }

void TwoShotAllReduce::reduce(ExchangeSchedule& s, std::span<float* const> data, int64_t n) const {
  const precision::Codec& codec = *codec_;
  const int world = s.worldSize();
  const int first = s.firstLocalRank();
  const auto local = static_cast<size_t>(s.localRankCount());
  const auto w = static_cast<size_t>(world);

  // Encoded layout of a whole buffer: chunk c at offsets[c], counts[c] bytes.
  const auto layout = s.encodedLayout(codec, n);
  const std::vector<size_t>& counts = layout.counts;
  const std::vector<size_t>& offsets = layout.offsets;

  // Phase 1: every rank encodes each chunk of its input; chunk c goes to rank c.
  std::vector<uint8_t*> sendBuf(local), recvBuf(local);
  for (size_t i = 0; i < local; ++i) {
    const int rank = first + static_cast<int>(i);
    sendBuf[i] = s.scratch(kSend, i, offsets[w]);
    for (int c = 0; c < world; ++c) {
      const int64_t len = s.chunkSize(n, c);
      if (len == 0) continue;
      const int64_t begin = s.chunkBegin(n, c);
      codec.encode(data[i] + begin, len, sendBuf[i] + offsets[static_cast<size_t>(c)],
                   s.encodeContext(rank, kEncodeInputPhase, begin));
      s.observeEncode(codec, EncodeObserver::Site::Input, begin, len, data[i] + begin,
                      sendBuf[i] + offsets[static_cast<size_t>(c)]);
    }
    recvBuf[i] = s.scratch(kRecv, i, counts[static_cast<size_t>(rank)] * w);
  }
  // Every pair with a local end, once: local senders to everyone, then the receives of local
  // ranks from remote senders (O(N) per local rank, not O(N^2), on a real rank).
  auto pair = [&](int src, int dst) {
    const void* sendData =
        s.isLocal(src) ? sendBuf[static_cast<size_t>(src - first)] + offsets[static_cast<size_t>(dst)] : nullptr;
    void* recvData = s.isLocal(dst) ? recvBuf[static_cast<size_t>(dst - first)] +
                                          static_cast<size_t>(src) * counts[static_cast<size_t>(dst)]
                                    : nullptr;
    s.add(src, dst, sendData, recvData, counts[static_cast<size_t>(dst)]);
  };
  for (int src = first; src < first + static_cast<int>(local); ++src)
    for (int dst = 0; dst < world; ++dst) pair(src, dst);
  for (int dst = first; dst < first + static_cast<int>(local); ++dst)
    for (int src = 0; src < world; ++src)
      if (!s.isLocal(src)) pair(src, dst);
  s.flush();

  // Phase 2: the owner of chunk c sums the N decoded contributions in fp32 in rank order and
  // encodes the sum once.
  std::vector<uint8_t*> sumBuf(local);
  std::vector<const void*> sumPtr(local);
  RankOrderSum sum(codec, RankOrderSum::Mode::Fp32, s.baseContext(), 0);
  for (size_t i = 0; i < local; ++i) {
    const int rank = first + static_cast<int>(i);
    const size_t bytes = counts[static_cast<size_t>(rank)];
    const int64_t len = s.chunkSize(n, rank);
    sumBuf[i] = s.scratch(kSum, i, bytes);
    sumPtr[i] = sumBuf[i];
    if (len == 0) continue;
    sum.reset(len);
    for (int k = 0; k < world; ++k) sum.add(recvBuf[i] + static_cast<size_t>(k) * bytes);
    codec.encode(sum.fp32Sum(), len, sumBuf[i], s.encodeContext(rank, kEncodeSumPhase, s.chunkBegin(n, rank)));
    s.observeEncode(codec, EncodeObserver::Site::Sum, s.chunkBegin(n, rank), len, sum.fp32Sum(), sumBuf[i]);
  }

  // Phase 3: all-gather the encoded sums; every rank decodes the same bytes.
  uint8_t* gathered = s.scratch(kGathered, 0, offsets[w]);
  s.allGatherShared(sumPtr, counts, std::span<const size_t>(offsets).first(w), gathered);
  for (int c = 0; c < world; ++c) {
    const int64_t len = s.chunkSize(n, c);
    if (len > 0) codec.decode(gathered + offsets[static_cast<size_t>(c)], len, data[0] + s.chunkBegin(n, c));
  }
  for (size_t i = 1; i < local; ++i) {
    if (n > 0) std::memcpy(data[i], data[0], static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace aps::comm
