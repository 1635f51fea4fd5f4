#include "comm/AllReduceAlgorithm.h"

#include "comm/AllGatherAllReduce.h"
#include "comm/Fp32WireCodec.h"
#include "comm/NonFinite.h"
#include "comm/RingAllReduce.h"
#include "comm/TwoShotAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace aps::comm {

namespace {

// The tiny MAX reduction of the non-finite flags: one byte per rank, all-gathered.
bool anyRankNonFinite(ExchangeSchedule& s, std::span<float* const> data, int64_t n) {
  const auto local = static_cast<size_t>(s.localRankCount());
  const auto w = static_cast<size_t>(s.worldSize());
  std::vector<uint8_t> mine(local), all(w, 0);
  std::vector<const void*> ptr(local);
  for (size_t i = 0; i < local; ++i) ptr[i] = &mine[i];
  parallelFor(static_cast<int64_t>(local), 1, [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) mine[i] = hasNonFinite(data[i], n) ? 1 : 0;
  });
  std::vector<size_t> counts(w, 1), offsets(w);
  for (size_t r = 0; r < w; ++r) offsets[r] = r;
  s.allGatherShared(ptr, counts, offsets, all.data());
  return std::any_of(all.begin(), all.end(), [](uint8_t f) { return f != 0; });
}

}  // namespace

void AllReduceAlgorithm::foldInput(float* /*acc*/, const float* /*input*/, int64_t /*n*/, bool /*first*/) const {
  APS_FAIL("comm {}: does not sum inputs ahead", name());
}

uint64_t SyncStats::maxBytesSent() const {
  return bytesSent.empty() ? 0 : *std::max_element(bytesSent.begin(), bytesSent.end());
}

std::string_view allReduceKindName(AllReduceKind kind) { return kAllReduceKindNames.name(kind); }

AllReduceKind parseAllReduceKind(std::string_view name) {
  if (const auto kind = kAllReduceKindNames.find(name)) return *kind;
  APS_FAIL("unknown comm.algorithm '{}' (expected {})", name, kAllReduceKindNames.list());
}

SyncStats AllReduceAlgorithm::run(Transport& transport, std::span<float* const> data, int64_t n,
                                  const precision::EncodeContext& ctx, EncodeObserver* observer, bool resultInFirstOnly,
                                  bool inputsSummedInFirst, const InputFacts* inputs) const {
  APS_CHECK(data.size() == static_cast<size_t>(transport.localRankCount()),
            "comm {}: got {} buffers for {} local ranks", name(), data.size(), transport.localRankCount());
  APS_CHECK(n >= 0, "comm {}: negative element count {}", name(), n);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto start = std::chrono::steady_clock::now();
  ExchangeSchedule schedule(transport, ctx, scratch_);
  schedule.setObserver(observer);
  schedule.setResultInFirstOnly(resultInFirstOnly);
  // Folded inputs are gone: only a result that keeps a NaN or inf can flag them.
  APS_CHECK(!inputsSummedInFirst || (sumsInputsAhead() && resultKeepsNonFinite() && observer == nullptr),
            "comm {}: cannot take inputs summed ahead", name());
  schedule.setInputsSummedInFirst(inputsSummedInFirst);
  const bool nonFiniteKnown = inputs != nullptr && inputs->nonFinite.has_value();
  // Inputs kept as keys have no buffers to scale in place or to check: the reduction reads
  // them itself, and the hooks said whether any is NaN or infinite.
  const Sticky16Inputs* sticky16 = inputs != nullptr ? inputs->sticky16 : nullptr;
  if (sticky16 != nullptr) {
    const bool observesInputs = observer != nullptr && observer->observes(EncodeObserver::Site::Input);
    APS_CHECK(readsSticky16Inputs() && !inputsSummedInFirst && !observesInputs && resultInFirstOnly &&
                  (nonFiniteKnown || !checkFinite_) && (inputs->shifts.empty() || appliesInputShifts(schedule)),
              "comm {}: cannot read inputs kept as 16-bit keys here", name());
    schedule.setSticky16Inputs(sticky16);
  }
  // The hooks' scalings: applied by reduce() as it reads the inputs where it can, else to the
  // buffers here (and where no hook said whether they hold a NaN or inf: that pass reads the
  // values as they are reduced).
  if (inputs != nullptr && !inputs->shifts.empty()) {
    APS_CHECK(!inputsSummedInFirst, "comm {}: inputs summed ahead cannot be scaled", name());
    schedule.setInputShifts(inputs->shifts);
    if (!nonFiniteKnown || !appliesInputShifts(schedule)) {
      applyInputShifts(data, inputs->shifts);
      schedule.setInputShifts({});
    }
  }
  SyncStats stats;
  // Flags are taken before the reduction overwrites the inputs. The result is identical on
  // every rank, so checking it locally is consistent too (catches overflow in the sum).
  if (checkFinite_ && !resultKeepsNonFinite()) {
    stats.nonFinite = nonFiniteKnown ? inputs->nonFinite.value() : anyRankNonFinite(schedule, data, n);
  }
  reduce(schedule, data, n);
  if (checkFinite_ && !stats.nonFinite) stats.nonFinite = hasNonFinite(data[0], n);
  stats.bytesSent = schedule.bytesSent();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

std::unique_ptr<AllReduceAlgorithm> makeAllReduce(const AllReduceOptions& options,
                                                  std::shared_ptr<const precision::Codec> codec) {
  std::unique_ptr<AllReduceAlgorithm> algorithm;
  if (options.kind == AllReduceKind::Native) {
    algorithm = std::make_unique<TwoShotAllReduce>(std::make_shared<Fp32WireCodec>(), "native", options.segmentBytes);
  } else {
    APS_CHECK(codec != nullptr, "comm {}: needs a wire codec", allReduceKindName(options.kind));
    switch (options.kind) {
      case AllReduceKind::Ring:
        algorithm = std::make_unique<RingAllReduce>(std::move(codec));
        break;
      case AllReduceKind::TwoShot:
        algorithm = std::make_unique<TwoShotAllReduce>(std::move(codec), "two_shot", options.segmentBytes);
        break;
      case AllReduceKind::AllGather:
        algorithm = std::make_unique<AllGatherAllReduce>(std::move(codec), options.roundEveryAdd, options.kahan);
        break;
      case AllReduceKind::Native:
        break;
    }
  }
  algorithm->setCheckFinite(options.checkFinite);
  return algorithm;
}

}  // namespace aps::comm
