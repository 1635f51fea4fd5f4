#include "comm/TwoShotAllReduce.h"

#include "comm/RankOrderSum.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

#include <algorithm>
#include <cstring>

namespace aps::comm {

namespace {
// Scratch slots.
enum Slot { kSend = 0, kRecv = 1, kSum = 2, kGathered = 3, kAcc = 4, kObserved = 5 };
// The simulator's owners whose fp32 sums a thread keeps in the cache at once (bytes).
constexpr int64_t kSumBlockBytes = int64_t{256} << 10;
// Values of a sender's piece encoded and added at once by its owner (encodesAtOwners): their
// scaled values and bytes stay in the first-level cache.
constexpr int64_t kOwnerBlockValues = 2048;

// The codec's promise of the fp32 path (Codec::encodesFp32Bits): an observer of neither the
// inputs' nor the sums' encodes, in one address space, lets the owners read the inputs as
// they lie.
bool readsInputsInPlace(const precision::Codec& codec, const ExchangeSchedule& s) {
  return codec.encodesFp32Bits() && !s.observing(EncodeObserver::Site::Input) &&
         !s.observing(EncodeObserver::Site::Sum);
}
bool simulatedInPlace(const ExchangeSchedule& s) { return s.localRankCount() == s.worldSize() && s.sharesMemory(); }
}  // namespace

bool TwoShotAllReduce::encodesAtOwners(const ExchangeSchedule& s) const {
  return simulatedInPlace(s) && !readsInputsInPlace(*codec_, s) && !s.inputsSummedInFirst() &&
         !s.observing(EncodeObserver::Site::Input);
}

TwoShotAllReduce::TwoShotAllReduce(std::shared_ptr<const precision::Codec> codec, std::string name,
                                   int64_t segmentBytes)
    : codec_(std::move(codec)), name_(std::move(name)), segmentBytes_(segmentBytes) {
  APS_CHECK(codec_ != nullptr, "comm {}: needs a codec", name_);
  APS_CHECK(segmentBytes >= 0, "comm {}: segment size {} is negative", name_, segmentBytes);
}

std::string TwoShotAllReduce::name() const { return name_ + "/" + codec_->name(); }

// The owners' sum (RankOrderSum's fp32 mode), one rank at a time; the inputs are read as
// their own encoding (fp32 bits), as reduce() reads them in place.
void TwoShotAllReduce::foldInput(float* acc, const float* input, int64_t n, bool first) const {
  APS_CHECK(sumsInputsAhead(), "comm {}: does not sum inputs ahead", name());
  RankOrderSum::addFp32(*codec_, reinterpret_cast<const uint8_t*>(input), n, acc, first);
}

TwoShotAllReduce::Segments TwoShotAllReduce::segments(int64_t n, int world) const {
  // Chunk c is [n c / world, n (c + 1) / world): the longest has ceil(n / world) values.
  const int64_t longest = (n + world - 1) / world;
  if (longest == 0) return {0, 0};
  const int64_t granule = codec_->splitGranule();
  int64_t length = longest;
  if (granule > 0 && segmentBytes_ > 0) {
    // The values whose encoding takes segmentBytes, at the longest chunk's bytes per value
    // (IEEE arithmetic on the same integers: every process derives the same length).
    const double perValue = static_cast<double>(encodedSize(*codec_, longest)) / static_cast<double>(longest);
    const auto values = static_cast<int64_t>(std::min(static_cast<double>(segmentBytes_) / perValue, 1e18));
    length = std::clamp(values / granule * granule, granule, longest);
  }
  return {length, (longest + length - 1) / length};
}

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

  // Segment k of chunk c: values [k * seg.length, +segmentSize(c, k)) of the chunk, encoded
  // on its own at byte k * stride of the chunk's encoding. The pieces of a chunk fill exactly
  // counts[c] bytes (Codec::splitGranule); checked, as a codec that breaks the promise would
  // otherwise corrupt its neighbours.
  const Segments seg = segments(n, world);
  const size_t stride = encodedSize(codec, seg.length);
  auto segmentSize = [&](int c, int64_t k) {
    return std::clamp<int64_t>(s.chunkSize(n, c) - k * seg.length, 0, seg.length);
  };
  auto segmentBytes = [&](int c, int64_t k) { return encodedSize(codec, segmentSize(c, k)); };
  for (int c = 0; c < world; ++c) {
    const int64_t len = s.chunkSize(n, c);
    const int64_t pieces = (len + seg.length - 1) / std::max<int64_t>(seg.length, 1);
    APS_CHECK(pieces <= 1 || (pieces - 1) * stride + segmentBytes(c, pieces - 1) == counts[static_cast<size_t>(c)],
              "comm {}: codec {} does not split at multiples of its granule {}", name(), codec.name(),
              codec.splitGranule());
  }

  // Simulated ranks: every rank of the world lives in this process.
  const bool simulated = local == w;
  // In one address space (the simulator) the owner of chunk c reads each sender's encoded
  // chunk where the sender wrote it: the all-to-all delivers nothing, and counts its bytes.
  const bool inPlace = simulatedInPlace(s);
  // There, a codec that encodes fp32 as its own bits (fp32 itself) is not run on the inputs:
  // the owners sum the senders' values where they lie (Codec::encodesFp32Bits; the encoded sum
  // has the same bytes), unless an observer wants the inputs' or sums' encodings.
  const bool readInputs = inPlace && readsInputsInPlace(codec, s);
  // The inputs summed ahead (foldInput, in rank order): data[0] holds every chunk's fp32 sum.
  const bool summedAhead = s.inputsSummedInFirst();
  APS_CHECK(!summedAhead || readInputs, "comm {}: inputs summed ahead need fp32 on the wire in one address space",
            name());
  // There too, where no observer wants the inputs' encodings, a sender's piece is encoded by
  // the thread that adds it, block by block in the cache, just before it is added: the values
  // the sender's encode would carry (cut at multiples of the codec's granule, Codec::
  // splitGranule), none of its bytes written to memory and read back, and the hooks' input
  // shifts applied on the way (where the buffers are not scaled in place first).
  const bool encodeAtOwner = encodesAtOwners(s);
  const std::span<const InputShift> shifts = s.inputShifts();
  APS_CHECK(shifts.empty() || encodeAtOwner, "comm {}: cannot apply input shifts on this path", name());
  // Simulated ranks' inputs kept as 16-bit keys: widened block by block as they are encoded.
  const Sticky16Inputs* sticky = s.sticky16Inputs();
  APS_CHECK(sticky == nullptr || encodeAtOwner, "comm {}: cannot read 16-bit keys on this path", name());
  const int64_t granule = codec.splitGranule();
  const int64_t ownerBlock =
      granule > 0 ? std::max<int64_t>(kOwnerBlockValues / granule, 1) * granule : std::max<int64_t>(seg.length, 1);
  std::vector<uint8_t*> sendBuf(local), recvBuf(local), sumBuf(local);
  std::vector<float*> acc(local);
  // In one address space the owners' sums lie back to back, each chunk's at its offset, so
  // that consecutive owners' sums are one range (one call per sender below).
  float* accAll = inPlace && !summedAhead ? s.scratchFloats(kAcc, 0, static_cast<size_t>(n)) : nullptr;
  for (size_t i = 0; i < local; ++i) {
    const auto rank = static_cast<size_t>(first) + i;
    sendBuf[i] = readInputs || encodeAtOwner ? nullptr : s.scratch(kSend, i, offsets[w]);
    recvBuf[i] = inPlace ? nullptr : s.scratch(kRecv, i, counts[rank] * w);
    sumBuf[i] = s.scratch(kSum, i, counts[rank]);
    // Summed ahead, the sums are already in data[0].
    if (accAll != nullptr) {
      acc[i] = accAll + s.chunkBegin(n, static_cast<int>(rank));
    } else if (!summedAhead) {
      acc[i] = s.scratchFloats(kAcc, i, static_cast<size_t>(s.chunkSize(n, static_cast<int>(rank))));
    }
  }
  uint8_t* gathered = s.scratch(kGathered, 0, offsets[w]);

  // Observers see one call per chunk with the chunk's whole encoding, as without segments:
  // with several segments the whole chunk is encoded once more for them (the bytes decode to
  // the segments' values), only when some observer wants the site.
  auto observe = [&](EncodeObserver::Site site, int rank, int phase, int64_t begin, int64_t len, const float* values,
                     const uint8_t* segmented) {
    if (!s.observing(site) || len == 0) return;
    const uint8_t* whole = segmented;
    if (seg.count > 1) {
      uint8_t* bytes = s.scratch(kObserved, 0, encodedSize(codec, len));
      codec.encode(values, len, bytes, s.encodeContext(rank, phase, begin));
      whole = bytes;
    }
    s.observeEncode(codec, site, begin, len, values, whole);
  };
  // The inputs' encodes, reported once the first segment is encoded and before any result
  // overwrites an input (data[0] from step 2 on).
  auto observeInputs = [&] {
    if (!s.observing(EncodeObserver::Site::Input)) return;
    for (size_t i = 0; i < local; ++i) {
      const int rank = first + static_cast<int>(i);
      for (int c = 0; c < world; ++c) {
        const int64_t begin = s.chunkBegin(n, c);
        observe(EncodeObserver::Site::Input, rank, kEncodeInputPhase, begin, s.chunkSize(n, c), data[i] + begin,
                sendBuf[i] + offsets[static_cast<size_t>(c)]);
      }
    }
  };

  // Simulated ranks compute their encodes, sums and decodes on all threads; each writes its
  // own bytes from its own context, so the result does not depend on the thread count. The
  // rounds in flight are then driven between those loops, from this thread (the schedule is
  // not shared), rather than between slices.
  auto progress = [&] {
    if (!simulated) s.progress();
  };
  auto forRange = [&](int64_t count, int64_t grain, const auto& range) {
    if (simulated) {
      parallelForRethrowing(count, grain, range);
      s.progress();
    } else {
      range(int64_t{0}, count);
    }
  };
  auto forEachLocal = [&](const auto& body) {
    forRange(static_cast<int64_t>(local), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) body(static_cast<size_t>(i));
    });
  };

  // Phase 1 of segment k: every rank encodes segment k of each chunk of its input; chunk c's
  // goes to rank c. Started, not waited for.
  auto encodeAndSend = [&](int64_t k) {
    if (!readInputs && !encodeAtOwner)
      forEachLocal([&](size_t i) {
        const int rank = first + static_cast<int>(i);
        for (int c = 0; c < world; ++c) {
          const int64_t len = segmentSize(c, k);
          if (len == 0) continue;
          const int64_t begin = s.chunkBegin(n, c) + k * seg.length;
          codec.encode(data[i] + begin, len, sendBuf[i] + offsets[static_cast<size_t>(c)] + k * stride,
                       s.encodeContext(rank, kEncodeInputPhase, begin));
          progress();
        }
      });
    if (inPlace) {
      // One address space: nothing is delivered; each sender counts segment k of every chunk
      // but its own (O(N), where pair by pair was 65536 calls a segment at 256 ranks).
      size_t all = 0;
      for (int c = 0; c < world; ++c) all += segmentBytes(c, k);
      for (int src = first; src < first + static_cast<int>(local); ++src) s.countSent(src, all - segmentBytes(src, k));
      return s.start();
    }
    // Every pair with a local end, once: local senders to everyone, then the receives of local
    // ranks from remote senders (O(N) per local rank, not O(N^2), on a real rank).
    auto pair = [&](int src, int dst) {
      const auto d = static_cast<size_t>(dst);
      const void* sendData =
          s.isLocal(src) ? sendBuf[static_cast<size_t>(src - first)] + offsets[d] + k * stride : nullptr;
      void* recvData =
          s.isLocal(dst) ? recvBuf[static_cast<size_t>(dst - first)] + static_cast<size_t>(src) * counts[d] + k * stride
                         : nullptr;
      s.add(src, dst, sendData, recvData, segmentBytes(dst, k));
    };
    for (int src = first; src < first + static_cast<int>(local); ++src)
      for (int dst = 0; dst < world; ++dst) pair(src, dst);
    for (int dst = first; dst < first + static_cast<int>(local); ++dst)
      for (int src = 0; src < world; ++src)
        if (!s.isLocal(src)) pair(src, dst);
    return s.start();
  };

  // Phase 2 of segment k: the owner of chunk c sums the N decoded contributions in fp32 in
  // rank order and encodes the sum once; phase 3 starts: the all-gather of the encoded sums.
  std::vector<const void*> sumPtr(local);
  std::vector<size_t> gatherCounts(w), gatherOffsets(w);
  // Where every sender's encoding lies in this address space (the simulator), a thread sums
  // a block of consecutive owners' chunks sender by sender: each sender's pieces for the block
  // lie back to back (one stream to read, where owner by owner every 1-4 KiB piece was on a
  // page of its own, far from the last: 9 GB/s at 256 ranks), the block's sums stay in the
  // cache. Each owner's sum takes the same additions in the same (rank) order: the same bits.
  const bool sendersMajor = inPlace && !summedAhead;
  // Sender src's values [begin, begin + len) encoded block by block and added to sum.
  // Keys widened, scaled and rounded in registers, range by range (roundTripSticky16Into),
  // where the codec rounds alike at any cut; otherwise widened, scaled, then rounded, block by
  // block.
  const bool keysByRange = sticky != nullptr && codec.roundTripsAlikeAtAnyCut();
  auto encodeAndAdd = [&](int src, int64_t begin, int64_t len, float* sum, float* scaled, uint8_t* bytes,
                          float* widened) {
    const auto i = static_cast<size_t>(src);
    const uint16_t* keys = sticky != nullptr ? sticky->keys[i] : nullptr;
    const float* values = keys != nullptr ? nullptr : data[i] + begin;
    for (int64_t a = 0; a < len; a += ownerBlock) {
      const int64_t m = std::min(ownerBlock, len - a);
      // The sender's next values follow these: asked for now, they arrive while these are
      // added (the loop would otherwise wait on memory, then add, then wait).
      if (keys != nullptr) {
        for (int64_t v = a + m; v < std::min(a + 2 * m, n - begin); v += 32) __builtin_prefetch(keys + begin + v);
        if (keysByRange) {
          roundTripSticky16Into(codec, *sticky, i, shifts, begin + a, m, sum + a, src != 0, widened, scaled, bytes,
                                s.encodeContext(src, kEncodeInputPhase, begin + a));
          continue;
        }
        readSticky16(*sticky, i, begin + a, m, widened);
      } else {
        for (int64_t v = a + m; v < std::min(a + 2 * m, n - begin); v += 16) __builtin_prefetch(values + v);
      }
      const float* block = keys != nullptr ? widened : values + a;
      // What encoding and then RankOrderSum::addFp32 of the bytes give, rounded in registers
      // where the codec can (Codec::roundTripInto). Blocks start at multiples of the codec's
      // granule from a chunk's start, so each value takes the path it takes in the whole
      // chunk's decode (or from a run of owners' start, ownersAsOne: any cut is alike).
      const float* in = shiftedInputs(shifts, begin + a, m, block, scaled);
      codec.roundTripInto(in, m, sum + a, src != 0, bytes, s.encodeContext(src, kEncodeInputPhase, begin + a));
    }
  };
  // Where the codec rounds alike at any cut and a chunk is one segment, the owners' values
  // [i0, i1) of a sender are one range, and so are their sums: one call per sender, where one
  // per owner cost more than the values at 256 ranks (a bucket of 12 k values gives each owner
  // 46: 65536 calls a step, each with its own set-up and scalar rest).
  const bool ownersAsOne = encodeAtOwner && seg.count == 1 && accAll != nullptr && codec.roundTripsAlikeAtAnyCut();
  auto sumBlockBySender = [&](int64_t k, int64_t i0, int64_t i1, float* scaled, uint8_t* bytes, float* widened) {
    if (ownersAsOne) {
      const int64_t begin = s.chunkBegin(n, static_cast<int>(i0));
      const int64_t len = s.chunkBegin(n, static_cast<int>(i1)) - begin;
      if (len == 0) return;
      for (int src = 0; src < world; ++src) encodeAndAdd(src, begin, len, accAll + begin, scaled, bytes, widened);
      return;
    }
    for (int src = 0; src < world; ++src) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t len = segmentSize(static_cast<int>(i), k);
        if (len == 0) continue;
        const int64_t begin = s.chunkBegin(n, static_cast<int>(i)) + k * seg.length;
        float* sum = acc[static_cast<size_t>(i)] + k * seg.length;
        if (encodeAtOwner) {
          encodeAndAdd(src, begin, len, sum, scaled, bytes, widened);
          continue;
        }
        const uint8_t* from = readInputs
                                  ? reinterpret_cast<const uint8_t*>(data[static_cast<size_t>(src)] + begin)
                                  : sendBuf[static_cast<size_t>(src)] + offsets[static_cast<size_t>(i)] + k * stride;
        RankOrderSum::addFp32(codec, from, len, sum, src == 0);
      }
    }
  };
  auto sumAndGather = [&](int64_t k) {
    if (sendersMajor) {
      forRange(static_cast<int64_t>(local), 1, [&](int64_t i0, int64_t i1) {
        // A block of one sender's values, scaled, and its encoding (encodeAtOwner).
        std::vector<float> scaled(encodeAtOwner && !shifts.empty() ? static_cast<size_t>(ownerBlock) : 0);
        std::vector<uint8_t> bytes(encodeAtOwner ? encodedSize(codec, ownerBlock) : 0);
        std::vector<float> widened(sticky != nullptr ? static_cast<size_t>(ownerBlock) : 0);
        for (int64_t b0 = i0; b0 < i1;) {
          // Owners [b0, b1): sums of at most kSumBlockBytes together (at least one owner).
          int64_t b1 = b0 + 1, floats = segmentSize(static_cast<int>(b0), k);
          while (b1 < i1 && (floats + segmentSize(static_cast<int>(b1), k)) * 4 <= kSumBlockBytes)
            floats += segmentSize(static_cast<int>(b1++), k);
          sumBlockBySender(k, b0, b1, scaled.data(), bytes.data(), widened.data());
          for (int64_t i = b0; i < b1; ++i) {
            const int64_t len = segmentSize(static_cast<int>(i), k);
            sumPtr[static_cast<size_t>(i)] = sumBuf[static_cast<size_t>(i)] + k * stride;
            if (len == 0) continue;
            const int64_t begin = s.chunkBegin(n, static_cast<int>(i)) + k * seg.length;
            codec.encode(acc[static_cast<size_t>(i)] + k * seg.length, len, sumBuf[static_cast<size_t>(i)] + k * stride,
                         s.encodeContext(static_cast<int>(i), kEncodeSumPhase, begin));
          }
          b0 = b1;
        }
      });
    } else {
      forEachLocal([&](size_t i) {
        const int rank = first + static_cast<int>(i);
        const size_t bytes = counts[static_cast<size_t>(rank)];
        const int64_t len = segmentSize(rank, k);
        sumPtr[i] = sumBuf[i] + k * stride;
        if (len == 0) return;
        const int64_t begin = s.chunkBegin(n, rank) + k * seg.length;
        if (summedAhead) {
          codec.encode(data[0] + begin, len, sumBuf[i] + k * stride, s.encodeContext(rank, kEncodeSumPhase, begin));
          progress();
          return;
        }
        // A real rank: the senders' pieces were delivered to recvBuf.
        RankOrderSum sum(codec, RankOrderSum::Mode::Fp32, s.baseContext(), 0);
        sum.resetInto(len, acc[i] + k * seg.length);
        for (int src = 0; src < world; ++src) {
          sum.add(recvBuf[i] + static_cast<size_t>(src) * bytes + k * stride);
          progress();
        }
        codec.encode(sum.fp32Sum(), len, sumBuf[i] + k * stride, s.encodeContext(rank, kEncodeSumPhase, begin));
        progress();
      });
    }
    for (size_t c = 0; c < w; ++c) {
      gatherCounts[c] = segmentBytes(static_cast<int>(c), k);
      gatherOffsets[c] = offsets[c] + k * stride;
    }
    return s.startAllGatherShared(sumPtr, gatherCounts, gatherOffsets, gathered);
  };

  // Phase 3 of segment k, once gathered: every rank decodes the same bytes.
  auto decode = [&](int64_t k) {
    forRange(world, 16, [&](int64_t c0, int64_t c1) {
      for (auto c = static_cast<int>(c0); c < c1; ++c) {
        const int64_t len = segmentSize(c, k);
        if (len == 0) continue;
        codec.decode(gathered + offsets[static_cast<size_t>(c)] + k * stride, len,
                     data[0] + s.chunkBegin(n, c) + k * seg.length);
        progress();
      }
    });
  };

  // The software pipeline: step t encodes and sends segment t, sums segment t - 1 once it
  // has arrived and starts its all-gather, and decodes segment t - 2 once gathered. Each
  // computation overlaps the rounds started before it (the all-to-all of segment t - 1 and
  // the all-gather of t - 2 while segment t is encoded). Every process starts the rounds in
  // the same order (all-to-all t, all-gather t - 1, ...), which is how their messages match.
  // Writes into data[0] (segment t - 2) never touch values still to be encoded (segment >= t).
  ExchangeTicket toOwners = kExchangeDone, gathering = kExchangeDone;
  for (int64_t t = 0; t < seg.count + 2; ++t) {
    const ExchangeTicket sent = t < seg.count ? encodeAndSend(t) : kExchangeDone;
    if (t == 0) observeInputs();
    ExchangeTicket summed = kExchangeDone;
    if (t >= 1 && t <= seg.count) {
      s.wait(toOwners);
      summed = sumAndGather(t - 1);
    }
    if (t >= 2) {
      s.wait(gathering);
      decode(t - 2);
    }
    toOwners = sent;
    gathering = summed;
  }

  for (size_t i = 0; i < local; ++i) {
    const int rank = first + static_cast<int>(i);
    const int64_t begin = s.chunkBegin(n, rank);
    observe(EncodeObserver::Site::Sum, rank, kEncodeSumPhase, begin, s.chunkSize(n, rank), acc[i], sumBuf[i]);
  }
  for (size_t i = 1; i < local && !s.resultInFirstOnly(); ++i) {
    if (n > 0) std::memcpy(data[i], data[0], static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace aps::comm
