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
  return simulatedInPlace(s) && !s.onDevice() && !readsInputsInPlace(*codec_, s) && !s.inputsSummedInFirst() &&
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

namespace {

// One reduce() call of the two-shot schedule: the plan (which path each phase takes, from the
// schedule's facts), its buffers, and the phases as named steps. run() is the plain schedule,
// pipelined over segments; each phase's variants are named methods below it.
class TwoShotPass {
 public:
  using Segments = TwoShotAllReduce::Segments;

  TwoShotPass(const precision::Codec& codec, std::string name, ExchangeSchedule& s, std::span<float* const> data,
              int64_t n, Segments seg, bool encodeAtOwner);

  // The software pipeline: step t encodes and sends segment t, sums segment t - 1 once it
  // has arrived and starts its all-gather, and decodes segment t - 2 once gathered. Each
  // computation overlaps the rounds started before it (the all-to-all of segment t - 1 and
  // the all-gather of t - 2 while segment t is encoded). Every process starts the rounds in
  // the same order (all-to-all t, all-gather t - 1, ...), which is how their messages match.
  // Writes into data[0] (segment t - 2) never touch values still to be encoded (segment >= t).
  void run() {
    ExchangeTicket toOwners = kExchangeDone, gathering = kExchangeDone;
    for (int64_t t = 0; t < seg_.count + 2; ++t) {
      const ExchangeTicket sent = t < seg_.count ? encodeAndSend(t) : kExchangeDone;
      if (t == 0) observeInputs();
      ExchangeTicket summed = kExchangeDone;
      if (t >= 1 && t <= seg_.count) {
        s_.wait(toOwners);
        summed = sumAndGather(t - 1);
      }
      if (t >= 2) {
        s_.wait(gathering);
        decode(t - 2);
      }
      toOwners = sent;
      gathering = summed;
    }
    observeSums();
    s_.copyResultToLocalRanks(data_, n_);
  }

 private:
  // Segment k of chunk c: values [k * seg.length, +segmentSize(c, k)) of the chunk, encoded
  // on its own at byte k * stride of the chunk's encoding.
  int64_t segmentSize(int c, int64_t k) const {
    return std::clamp<int64_t>(s_.chunkSize(n_, c) - k * seg_.length, 0, seg_.length);
  }
  size_t segmentBytes(int c, int64_t k) const { return encodedSize(codec_, segmentSize(c, k)); }
  int64_t segmentBegin(int c, int64_t k) const { return s_.chunkBegin(n_, c) + k * seg_.length; }
  void checkSegmentsFill() const;
  void allocate();

  // Phase 1 of segment k: every rank encodes segment k of each chunk of its input; chunk c's
  // goes to rank c. Started, not waited for.
  ExchangeTicket encodeAndSend(int64_t k) {
    if (!readInputs_ && !encodeAtOwner_) encodeInputs(k);
    return inPlace_ ? countInPlaceSends(k) : sendToOwners(k);
  }
  void encodeInputs(int64_t k);
  ExchangeTicket countInPlaceSends(int64_t k);
  ExchangeTicket sendToOwners(int64_t k);

  // Phase 2 of segment k: the owner of chunk c sums the N decoded contributions in fp32 in
  // rank order and encodes the sum once; phase 3 starts: the all-gather of the encoded sums.
  ExchangeTicket sumAndGather(int64_t k) {
    if (sendersMajor_) {
      sumSendersMajor(k);
    } else {
      sumOwnChunks(k);
    }
    for (size_t c = 0; c < w_; ++c) {
      gatherCounts_[c] = segmentBytes(static_cast<int>(c), k);
      gatherOffsets_[c] = layout_.offsets[c] + k * stride_;
    }
    return s_.startAllGatherShared(sumPtr_, gatherCounts_, gatherOffsets_, gathered_);
  }
  void sumSendersMajor(int64_t k);
  void sumBlockBySender(int64_t k, int64_t i0, int64_t i1, float* scaled, uint8_t* bytes, float* widened);
  void encodeAndAdd(int src, int64_t begin, int64_t len, float* sum, float* scaled, uint8_t* bytes, float* widened);
  void sumOwnChunks(int64_t k);

  // Phase 3 of segment k, once gathered: every rank decodes the same bytes.
  void decode(int64_t k);

  void observe(EncodeObserver::Site site, int rank, int phase, int64_t begin, int64_t len, const float* values,
               const uint8_t* segmented);
  void observeInputs();
  void observeSums();

  // Simulated ranks compute their encodes, sums and decodes on all threads; each writes its
  // own bytes from its own context, so the result does not depend on the thread count. The
  // rounds in flight are then driven between those loops, from this thread (the schedule is
  // not shared), rather than between slices.
  void progress() {
    if (!simulated_) s_.progress();
  }
  template <typename Range>
  void forRange(int64_t count, int64_t grain, const Range& range) {
    if (simulated_) {
      parallelForRethrowing(count, grain, range);
      s_.progress();
    } else {
      range(int64_t{0}, count);
    }
  }
  template <typename Body>
  void forEachLocal(const Body& body) {
    forRange(static_cast<int64_t>(local_), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) body(static_cast<size_t>(i));
    });
  }

  const precision::Codec& codec_;
  const std::string name_;
  ExchangeSchedule& s_;
  const std::span<float* const> data_;
  const int64_t n_;
  const Segments seg_;
  const int world_, first_;
  const size_t local_, w_;
  // Encoded layout of a whole buffer: chunk c at offsets[c], counts[c] bytes.
  const ExchangeSchedule::EncodedLayout layout_;
  const size_t stride_;
  // Simulated ranks: every rank of the world lives in this process (on the host: device work
  // is queued from this thread, whose device is the rank's).
  const bool simulated_;
  // In one address space (the simulator) the owner of chunk c reads each sender's encoded
  // chunk where the sender wrote it: the all-to-all delivers nothing, and counts its bytes.
  const bool inPlace_;
  // There, a codec that encodes fp32 as its own bits (fp32 itself) is not run on the inputs:
  // the owners sum the senders' values where they lie (Codec::encodesFp32Bits; the encoded sum
  // has the same bytes), unless an observer wants the inputs' or sums' encodings.
  const bool readInputs_;
  // The inputs summed ahead (foldInput, in rank order): data[0] holds every chunk's fp32 sum.
  const bool summedAhead_;
  // There too, where no observer wants the inputs' encodings, a sender's piece is encoded by
  // the thread that adds it, block by block in the cache, just before it is added: the values
  // the sender's encode would carry (cut at multiples of the codec's granule, Codec::
  // splitGranule), none of its bytes written to memory and read back, and the hooks' input
  // shifts applied on the way (where the buffers are not scaled in place first).
  const bool encodeAtOwner_;
  const std::span<const InputShift> shifts_;
  // Simulated ranks' inputs kept as 16-bit keys: widened block by block as they are encoded.
  const Sticky16Inputs* const sticky_;
  const int64_t ownerBlock_;
  // Where every sender's encoding lies in this address space (the simulator), a thread sums
  // a block of consecutive owners' chunks sender by sender: each sender's pieces for the block
  // lie back to back (one stream to read, where owner by owner every 1-4 KiB piece was on a
  // page of its own, far from the last: 9 GB/s at 256 ranks), the block's sums stay in the
  // cache. Each owner's sum takes the same additions in the same (rank) order: the same bits.
  const bool sendersMajor_;
  // Keys widened, scaled and rounded in registers, range by range (roundTripSticky16Into),
  // where the codec rounds alike at any cut; otherwise widened, scaled, then rounded, block by
  // block.
  const bool keysByRange_;
  // In one address space the owners' sums lie back to back, each chunk's at its offset, so
  // that consecutive owners' sums are one range (one call per sender below).
  float* accAll_ = nullptr;
  // Where the codec rounds alike at any cut and a chunk is one segment, the owners' values
  // [i0, i1) of a sender are one range, and so are their sums: one call per sender, where one
  // per owner cost more than the values at 256 ranks (a bucket of 12 k values gives each owner
  // 46: 65536 calls a step, each with its own set-up and scalar rest).
  bool ownersAsOne_ = false;
  std::vector<uint8_t*> sendBuf_, recvBuf_, sumBuf_;
  std::vector<float*> acc_;
  uint8_t* gathered_ = nullptr;
  std::vector<const void*> sumPtr_;
  std::vector<size_t> gatherCounts_, gatherOffsets_;
};

TwoShotPass::TwoShotPass(const precision::Codec& codec, std::string name, ExchangeSchedule& s,
                         std::span<float* const> data, int64_t n, Segments seg, bool encodeAtOwner)
    : codec_(codec),
      name_(std::move(name)),
      s_(s),
      data_(data),
      n_(n),
      seg_(seg),
      world_(s.worldSize()),
      first_(s.firstLocalRank()),
      local_(static_cast<size_t>(s.localRankCount())),
      w_(static_cast<size_t>(world_)),
      layout_(s.encodedLayout(codec, n)),
      stride_(encodedSize(codec, seg.length)),
      simulated_(local_ == w_ && !s.onDevice()),
      inPlace_(simulatedInPlace(s)),
      readInputs_(inPlace_ && readsInputsInPlace(codec, s)),
      summedAhead_(s.inputsSummedInFirst()),
      encodeAtOwner_(encodeAtOwner),
      shifts_(s.inputShifts()),
      sticky_(s.sticky16Inputs()),
      ownerBlock_(codec.splitGranule() > 0
                      ? std::max<int64_t>(kOwnerBlockValues / codec.splitGranule(), 1) * codec.splitGranule()
                      : std::max<int64_t>(seg.length, 1)),
      sendersMajor_(inPlace_ && !summedAhead_),
      keysByRange_(sticky_ != nullptr && codec.roundTripsAlikeAtAnyCut()),
      sumPtr_(local_),
      gatherCounts_(w_),
      gatherOffsets_(w_) {
  checkSegmentsFill();
  APS_CHECK(!summedAhead_ || readInputs_, "comm {}: inputs summed ahead need fp32 on the wire in one address space",
            name_);
  APS_CHECK(shifts_.empty() || encodeAtOwner_, "comm {}: cannot apply input shifts on this path", name_);
  APS_CHECK(sticky_ == nullptr || encodeAtOwner_, "comm {}: cannot read 16-bit keys on this path", name_);
  allocate();
  ownersAsOne_ = encodeAtOwner_ && seg_.count == 1 && accAll_ != nullptr && codec_.roundTripsAlikeAtAnyCut();
}

// The pieces of a chunk fill exactly counts[c] bytes (Codec::splitGranule); checked, as a
// codec that breaks the promise would otherwise corrupt its neighbours.
void TwoShotPass::checkSegmentsFill() const {
  for (int c = 0; c < world_; ++c) {
    const int64_t len = s_.chunkSize(n_, c);
    const int64_t pieces = (len + seg_.length - 1) / std::max<int64_t>(seg_.length, 1);
    APS_CHECK(
        pieces <= 1 || (pieces - 1) * stride_ + segmentBytes(c, pieces - 1) == layout_.counts[static_cast<size_t>(c)],
        "comm {}: codec {} does not split at multiples of its granule {}", name_, codec_.name(), codec_.splitGranule());
  }
}

void TwoShotPass::allocate() {
  const auto& counts = layout_.counts;
  sendBuf_.resize(local_);
  recvBuf_.resize(local_);
  sumBuf_.resize(local_);
  acc_.resize(local_);
  accAll_ = inPlace_ && !summedAhead_ ? s_.scratchFloats(kAcc, 0, static_cast<size_t>(n_)) : nullptr;
  for (size_t i = 0; i < local_; ++i) {
    const auto rank = static_cast<size_t>(first_) + i;
    sendBuf_[i] = readInputs_ || encodeAtOwner_ ? nullptr : s_.scratch(kSend, i, layout_.offsets[w_]);
    recvBuf_[i] = inPlace_ ? nullptr : s_.scratch(kRecv, i, counts[rank] * w_);
    sumBuf_[i] = s_.scratch(kSum, i, counts[rank]);
    // Summed ahead, the sums are already in data[0].
    if (accAll_ != nullptr) {
      acc_[i] = accAll_ + s_.chunkBegin(n_, static_cast<int>(rank));
    } else if (!summedAhead_) {
      acc_[i] = s_.scratchFloats(kAcc, i, static_cast<size_t>(s_.chunkSize(n_, static_cast<int>(rank))));
    }
  }
  gathered_ = s_.scratch(kGathered, 0, layout_.offsets[w_]);
}

void TwoShotPass::encodeInputs(int64_t k) {
  forEachLocal([&](size_t i) {
    const int rank = first_ + static_cast<int>(i);
    for (int c = 0; c < world_; ++c) {
      const int64_t len = segmentSize(c, k);
      if (len == 0) continue;
      const int64_t begin = segmentBegin(c, k);
      codec_.encode(data_[i] + begin, len, sendBuf_[i] + layout_.offsets[static_cast<size_t>(c)] + k * stride_,
                    s_.encodeContext(rank, TwoShotAllReduce::kEncodeInputPhase, begin));
      progress();
    }
  });
}

// One address space: nothing is delivered; each sender counts segment k of every chunk but its
// own (O(N), where pair by pair was 65536 calls a segment at 256 ranks).
ExchangeTicket TwoShotPass::countInPlaceSends(int64_t k) {
  size_t all = 0;
  for (int c = 0; c < world_; ++c) all += segmentBytes(c, k);
  for (int src = first_; src < first_ + static_cast<int>(local_); ++src) s_.countSent(src, all - segmentBytes(src, k));
  return s_.start();
}

// Every pair with a local end, once: local senders to everyone, then the receives of local
// ranks from remote senders (O(N) per local rank, not O(N^2), on a real rank).
ExchangeTicket TwoShotPass::sendToOwners(int64_t k) {
  const auto& counts = layout_.counts;
  auto pair = [&](int src, int dst) {
    const auto d = static_cast<size_t>(dst);
    const void* sendData =
        s_.isLocal(src) ? sendBuf_[static_cast<size_t>(src - first_)] + layout_.offsets[d] + k * stride_ : nullptr;
    void* recvData = s_.isLocal(dst) ? recvBuf_[static_cast<size_t>(dst - first_)] +
                                           static_cast<size_t>(src) * counts[d] + k * stride_
                                     : nullptr;
    s_.add(src, dst, sendData, recvData, segmentBytes(dst, k));
  };
  for (int src = first_; src < first_ + static_cast<int>(local_); ++src)
    for (int dst = 0; dst < world_; ++dst) pair(src, dst);
  for (int dst = first_; dst < first_ + static_cast<int>(local_); ++dst)
    for (int src = 0; src < world_; ++src)
      if (!s_.isLocal(src)) pair(src, dst);
  return s_.start();
}

// The simulator: blocks of owners of at most kSumBlockBytes of sums, each summed sender by
// sender, then each owner's sum encoded.
void TwoShotPass::sumSendersMajor(int64_t k) {
  forRange(static_cast<int64_t>(local_), 1, [&](int64_t i0, int64_t i1) {
    // A block of one sender's values, scaled, and its encoding (encodeAtOwner).
    std::vector<float> scaled(encodeAtOwner_ && !shifts_.empty() ? static_cast<size_t>(ownerBlock_) : 0);
    std::vector<uint8_t> bytes(encodeAtOwner_ ? encodedSize(codec_, ownerBlock_) : 0);
    std::vector<float> widened(sticky_ != nullptr ? static_cast<size_t>(ownerBlock_) : 0);
    for (int64_t b0 = i0; b0 < i1;) {
      // Owners [b0, b1): sums of at most kSumBlockBytes together (at least one owner).
      int64_t b1 = b0 + 1, floats = segmentSize(static_cast<int>(b0), k);
      while (b1 < i1 && (floats + segmentSize(static_cast<int>(b1), k)) * 4 <= kSumBlockBytes)
        floats += segmentSize(static_cast<int>(b1++), k);
      sumBlockBySender(k, b0, b1, scaled.data(), bytes.data(), widened.data());
      for (int64_t i = b0; i < b1; ++i) {
        const auto owner = static_cast<size_t>(i);
        const int64_t len = segmentSize(static_cast<int>(i), k);
        sumPtr_[owner] = sumBuf_[owner] + k * stride_;
        if (len == 0) continue;
        codec_.encode(acc_[owner] + k * seg_.length, len, sumBuf_[owner] + k * stride_,
                      s_.encodeContext(static_cast<int>(i), TwoShotAllReduce::kEncodeSumPhase,
                                       segmentBegin(static_cast<int>(i), k)));
      }
      b0 = b1;
    }
  });
}

void TwoShotPass::sumBlockBySender(int64_t k, int64_t i0, int64_t i1, float* scaled, uint8_t* bytes, float* widened) {
  if (ownersAsOne_) {
    const int64_t begin = s_.chunkBegin(n_, static_cast<int>(i0));
    const int64_t len = s_.chunkBegin(n_, static_cast<int>(i1)) - begin;
    if (len == 0) return;
    for (int src = 0; src < world_; ++src) encodeAndAdd(src, begin, len, accAll_ + begin, scaled, bytes, widened);
    return;
  }
  for (int src = 0; src < world_; ++src) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t len = segmentSize(static_cast<int>(i), k);
      if (len == 0) continue;
      const int64_t begin = segmentBegin(static_cast<int>(i), k);
      float* sum = acc_[static_cast<size_t>(i)] + k * seg_.length;
      if (encodeAtOwner_) {
        encodeAndAdd(src, begin, len, sum, scaled, bytes, widened);
        continue;
      }
      const uint8_t* from =
          readInputs_ ? reinterpret_cast<const uint8_t*>(data_[static_cast<size_t>(src)] + begin)
                      : sendBuf_[static_cast<size_t>(src)] + layout_.offsets[static_cast<size_t>(i)] + k * stride_;
      RankOrderSum::addFp32(codec_, from, len, sum, src == 0);
    }
  }
}

// Sender src's values [begin, begin + len) encoded block by block and added to sum.
void TwoShotPass::encodeAndAdd(int src, int64_t begin, int64_t len, float* sum, float* scaled, uint8_t* bytes,
                               float* widened) {
  const auto i = static_cast<size_t>(src);
  const uint16_t* keys = sticky_ != nullptr ? sticky_->keys[i] : nullptr;
  const float* values = keys != nullptr ? nullptr : data_[i] + begin;
  for (int64_t a = 0; a < len; a += ownerBlock_) {
    const int64_t m = std::min(ownerBlock_, len - a);
    const auto context = s_.encodeContext(src, TwoShotAllReduce::kEncodeInputPhase, begin + a);
    // The sender's next values follow these: asked for now, they arrive while these are
    // added (the loop would otherwise wait on memory, then add, then wait).
    if (keys != nullptr) {
      for (int64_t v = a + m; v < std::min(a + 2 * m, n_ - begin); v += 32) __builtin_prefetch(keys + begin + v);
      if (keysByRange_) {
        roundTripSticky16Into(codec_, *sticky_, i, shifts_, begin + a, m, sum + a, src != 0, widened, scaled, bytes,
                              context);
        continue;
      }
      readSticky16(*sticky_, i, begin + a, m, widened);
    } else {
      for (int64_t v = a + m; v < std::min(a + 2 * m, n_ - begin); v += 16) __builtin_prefetch(values + v);
    }
    const float* block = keys != nullptr ? widened : values + a;
    // What encoding and then RankOrderSum::addFp32 of the bytes give, rounded in registers
    // where the codec can (Codec::roundTripInto). Blocks start at multiples of the codec's
    // granule from a chunk's start, so each value takes the path it takes in the whole
    // chunk's decode (or from a run of owners' start, ownersAsOne: any cut is alike).
    const float* in = shiftedInputs(shifts_, begin + a, m, block, scaled);
    codec_.roundTripInto(in, m, sum + a, src != 0, bytes, context);
  }
}

// A real rank (the senders' pieces delivered to recvBuf), or the sums taken ahead: each local
// owner encodes its own chunk's sum.
void TwoShotPass::sumOwnChunks(int64_t k) {
  forEachLocal([&](size_t i) {
    const int rank = first_ + static_cast<int>(i);
    const size_t bytes = layout_.counts[static_cast<size_t>(rank)];
    const int64_t len = segmentSize(rank, k);
    sumPtr_[i] = sumBuf_[i] + k * stride_;
    if (len == 0) return;
    const int64_t begin = segmentBegin(rank, k);
    const auto context = s_.encodeContext(rank, TwoShotAllReduce::kEncodeSumPhase, begin);
    if (summedAhead_) {
      codec_.encode(data_[0] + begin, len, sumBuf_[i] + k * stride_, context);
      progress();
      return;
    }
    RankOrderSum sum(codec_, RankOrderSum::Mode::Fp32, s_.baseContext(), 0);
    sum.resetInto(len, acc_[i] + k * seg_.length);
    for (int src = 0; src < world_; ++src) {
      sum.add(recvBuf_[i] + static_cast<size_t>(src) * bytes + k * stride_);
      progress();
    }
    codec_.encode(sum.fp32Sum(), len, sumBuf_[i] + k * stride_, context);
    progress();
  });
}

void TwoShotPass::decode(int64_t k) {
  forRange(world_, 16, [&](int64_t c0, int64_t c1) {
    for (auto c = static_cast<int>(c0); c < c1; ++c) {
      const int64_t len = segmentSize(c, k);
      if (len == 0) continue;
      codec_.decode(gathered_ + layout_.offsets[static_cast<size_t>(c)] + k * stride_, len,
                    data_[0] + segmentBegin(c, k));
      progress();
    }
  });
}

// Observers see one call per chunk with the chunk's whole encoding, as without segments: with
// several segments the whole chunk is encoded once more for them (the bytes decode to the
// segments' values), only when some observer wants the site.
void TwoShotPass::observe(EncodeObserver::Site site, int rank, int phase, int64_t begin, int64_t len,
                          const float* values, const uint8_t* segmented) {
  if (!s_.observing(site) || len == 0) return;
  const uint8_t* whole = segmented;
  if (seg_.count > 1) {
    uint8_t* bytes = s_.scratch(kObserved, 0, encodedSize(codec_, len));
    codec_.encode(values, len, bytes, s_.encodeContext(rank, phase, begin));
    whole = bytes;
  }
  s_.observeEncode(codec_, site, begin, len, values, whole);
}

// The inputs' encodes, reported once the first segment is encoded and before any result
// overwrites an input (data[0] from step 2 on).
void TwoShotPass::observeInputs() {
  if (!s_.observing(EncodeObserver::Site::Input)) return;
  for (size_t i = 0; i < local_; ++i) {
    const int rank = first_ + static_cast<int>(i);
    for (int c = 0; c < world_; ++c) {
      const int64_t begin = s_.chunkBegin(n_, c);
      observe(EncodeObserver::Site::Input, rank, TwoShotAllReduce::kEncodeInputPhase, begin, s_.chunkSize(n_, c),
              data_[i] + begin, sendBuf_[i] + layout_.offsets[static_cast<size_t>(c)]);
    }
  }
}

void TwoShotPass::observeSums() {
  for (size_t i = 0; i < local_; ++i) {
    const int rank = first_ + static_cast<int>(i);
    observe(EncodeObserver::Site::Sum, rank, TwoShotAllReduce::kEncodeSumPhase, s_.chunkBegin(n_, rank),
            s_.chunkSize(n_, rank), acc_[i], sumBuf_[i]);
  }
}

}  // namespace

void TwoShotAllReduce::reduce(ExchangeSchedule& s, std::span<float* const> data, int64_t n) const {
  TwoShotPass(*codec_, name(), s, data, n, segments(n, s.worldSize()), encodesAtOwners(s)).run();
}

}  // namespace aps::comm
