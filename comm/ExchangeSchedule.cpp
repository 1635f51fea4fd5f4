#include "comm/ExchangeSchedule.h"

#include <algorithm>
#include <cstring>

#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::comm {

ExchangeSchedule::ExchangeSchedule(Transport& transport, const precision::EncodeContext& base, ScratchArena& scratch)
    : transport_(transport),
      scratch_(scratch),
      base_(base),
      world_(transport.worldSize()),
      first_(transport.firstLocalRank()),
      local_(transport.localRankCount()),
      bytesSent_(static_cast<size_t>(local_), 0) {}

void ExchangeSchedule::add(int src, int dst, const void* sendData, void* recvData, size_t bytes) {
  if (bytes == 0 || (!isLocal(src) && !isLocal(dst))) return;
  APS_ASSERT(!isLocal(src) || sendData != nullptr);
  APS_ASSERT(!isLocal(dst) || recvData != nullptr);
  if (src != dst) countSent(src, bytes);
  round_.push_back({src, dst, sendData, recvData, bytes});
}

void ExchangeSchedule::countSent(int src, size_t bytes) {
  if (isLocal(src)) bytesSent_[static_cast<size_t>(src - first_)] += bytes;
}

void ExchangeSchedule::observeEncode(const precision::Codec& codec, EncodeObserver::Site site, int64_t begin, int64_t n,
                                     const float* values, const uint8_t* encoded) {
  if (!observing(site) || n <= 0) return;
  float* decoded = scratchFloats(kObserverScratch, 0, static_cast<size_t>(n));
  codec.decode(encoded, n, decoded);
  if (onDevice() && !observer_->readsDeviceMemory()) {  // both copied back (a wait)
    const auto count = static_cast<size_t>(n);
    observedValues_.resize(count);
    observedDecoded_.resize(count);
    cuda::copySync(observedValues_.data(), values, count * sizeof(float), cuda::CopyKind::DeviceToHost);
    cuda::copySync(observedDecoded_.data(), decoded, count * sizeof(float), cuda::CopyKind::DeviceToHost);
    values = observedValues_.data();
    decoded = observedDecoded_.data();
  }
  observer_->encoded(site, begin, n, values, decoded);
}

void ExchangeSchedule::copyResultToLocalRanks(std::span<float* const> data, int64_t n) const {
  if (resultInFirstOnly_ || n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  for (size_t i = 1; i < data.size(); ++i) {
    if (onDevice()) {
      cuda::copyAsync(data[i], data[0], bytes, cuda::CopyKind::DeviceToDevice, cuda::currentStream());
    } else {
      std::memcpy(data[i], data[0], bytes);
    }
  }
}

void ExchangeSchedule::flush() {
  if (!round_.empty()) transport_.exchange(round_);
  round_.clear();
}

ExchangeTicket ExchangeSchedule::start() {
  ExchangeTicket ticket = kExchangeDone;
  if (!round_.empty()) ticket = transport_.startExchange(round_);
  round_.clear();
  if (ticket != kExchangeDone) inFlight_.push_back(ticket);
  return ticket;
}

void ExchangeSchedule::wait(ExchangeTicket ticket) {
  if (ticket == kExchangeDone) return;
  transport_.waitExchange(ticket);
  std::erase(inFlight_, ticket);
}

void ExchangeSchedule::progress() {
  // A ticket found complete stays with the transport until wait() releases it, but is not
  // tested again (a test of finished requests alone may not drive the others).
  std::erase_if(inFlight_, [this](ExchangeTicket t) { return transport_.testExchange(t); });
}

void ExchangeSchedule::allGatherShared(std::span<const void* const> sendData, std::span<const size_t> counts,
                                       std::span<const size_t> offsets, void* recv) {
  wait(startAllGatherShared(sendData, counts, offsets, recv));
}

ExchangeTicket ExchangeSchedule::startAllGatherShared(std::span<const void* const> sendData,
                                                      std::span<const size_t> counts, std::span<const size_t> offsets,
                                                      void* recv) {
  auto* out = static_cast<uint8_t*>(recv);
  for (int src = 0; src < world_; ++src) {
    const auto s = static_cast<size_t>(src);
    const void* data = isLocal(src) ? sendData[static_cast<size_t>(src - first_)] : nullptr;
    if (isLocal(src)) {
      for (int dst = 0; dst < world_; ++dst) {
        if (!isLocal(dst)) {
          add(src, dst, data, nullptr, counts[s]);
        } else if (dst != first_ && dst != src) {
          countSent(src, counts[s]);
        }
      }
    }
    add(src, first_, data, out + offsets[s], counts[s]);
  }
  return start();
}

ExchangeSchedule::EncodedLayout ExchangeSchedule::encodedLayout(const precision::Codec& codec, int64_t n) const {
  const auto w = static_cast<size_t>(world_);
  EncodedLayout layout{std::vector<size_t>(w), std::vector<size_t>(w + 1, 0), 0};
  for (size_t c = 0; c < w; ++c) {
    layout.counts[c] = encodedSize(codec, chunkSize(n, static_cast<int>(c)));
    layout.offsets[c + 1] = layout.offsets[c] + layout.counts[c];
    layout.maxCount = std::max(layout.maxCount, layout.counts[c]);
  }
  return layout;
}

precision::EncodeContext ExchangeSchedule::encodeContext(int rank, int phase, int64_t offset) const {
  return scheduleEncodeContext(base_, rank, phase, offset);
}

precision::EncodeContext scheduleEncodeContext(const precision::EncodeContext& base, int rank, int phase,
                                               int64_t offset) {
  // splitmix64 finaliser over (stream, rank, phase): distinct streams per encode site.
  uint64_t z = base.stream ^ (static_cast<uint64_t>(rank + 1) << 32) ^ static_cast<uint64_t>(phase);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return {base.seed, z, base.offset + offset};
}

}  // namespace aps::comm
