#include "comm/AllReduceAlgorithm.h"

#include "comm/AllGatherAllReduce.h"
#include "comm/Fp32WireCodec.h"
#include "comm/NonFinite.h"
#include "comm/RingAllReduce.h"
#include "comm/TwoShotAllReduce.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/cuda/DeviceCodec.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace aps::comm {

namespace {

// Scratch slots of run() itself, after the schedules' and the observer's.
constexpr int kFlagScratch = ExchangeSchedule::kObserverScratch + 1;
constexpr int kFlagsScratch = ExchangeSchedule::kObserverScratch + 2;

// hasNonFinite of each of buffers on `device`: their largest magnitudes' bits, read back
// together (one wait).
std::vector<uint8_t> deviceHasNonFinite(std::span<const float* const> data, int64_t n, Device device) {
  std::vector<uint8_t> flags(data.size(), 0);
  if (n <= 0 || data.empty()) return flags;
  std::vector<precision::cuda::DeviceRange> ranges;
  for (const float* d : data) ranges.push_back({d, n});
  const std::vector<uint32_t> bits = precision::cuda::absMaxBitsOf(ranges, device.index);
  for (size_t i = 0; i < data.size(); ++i) flags[i] = bits[i] > 0x7f7fffffu ? 1 : 0;
  return flags;
}

// The tiny MAX reduction of the non-finite flags: one byte per rank, all-gathered (through
// device memory where the buffers are on the device).
bool anyRankNonFinite(ExchangeSchedule& s, std::span<float* const> data, int64_t n) {
  const auto local = static_cast<size_t>(s.localRankCount());
  const auto w = static_cast<size_t>(s.worldSize());
  std::vector<uint8_t> mine(local), all(w, 0);
  std::vector<const void*> ptr(local);
  for (size_t i = 0; i < local; ++i) ptr[i] = &mine[i];
  std::vector<size_t> counts(w, 1), offsets(w);
  for (size_t r = 0; r < w; ++r) offsets[r] = r;
  if (s.onDevice()) {
    mine = deviceHasNonFinite(std::vector<const float*>(data.begin(), data.end()), n, s.device());
    uint8_t* flag = s.scratch(kFlagScratch, 0, local);
    uint8_t* flags = s.scratch(kFlagsScratch, 0, w);
    cuda::copySync(flag, mine.data(), local, cuda::CopyKind::HostToDevice);
    for (size_t i = 0; i < local; ++i) ptr[i] = flag + i;
    s.allGatherShared(ptr, counts, offsets, flags);
    cuda::copySync(all.data(), flags, w, cuda::CopyKind::DeviceToHost);
  } else {
    parallelFor(static_cast<int64_t>(local), 1, [&](int64_t i0, int64_t i1) {
      for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i)
        mine[i] = hasNonFinite(data[i], n) ? 1 : 0;
    });
    s.allGatherShared(ptr, counts, offsets, all.data());
  }
  return std::any_of(all.begin(), all.end(), [](uint8_t f) { return f != 0; });
}

// What run() refuses over device buffers, naming it.
void checkDeviceRun(const std::string& name, const Transport& transport, bool inputsSummedInFirst,
                    const InputFacts* inputs) {
  APS_CHECK(transport.sharesMemory() || transport.localRankCount() == 1,
            "comm {}: over device buffers a process hosts one rank, or the whole simulated world (transport {} hosts "
            "{} of {})",
            name, transport.transportName(), transport.localRankCount(), transport.worldSize());
  APS_CHECK(!inputsSummedInFirst && (inputs == nullptr || inputs->sticky16 == nullptr),
            "comm {}: inputs summed ahead or kept as 16-bit keys are the simulator's, not a device's", name);
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
  const bool onDevice = device().isCuda();
  if (onDevice) checkDeviceRun(name(), transport, inputsSummedInFirst, inputs);
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
    if (onDevice || !nonFiniteKnown || !appliesInputShifts(schedule)) {
      applyInputShifts(data, inputs->shifts, device());
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
  if (checkFinite_ && !stats.nonFinite)
    stats.nonFinite = onDevice ? deviceHasNonFinite(std::vector<const float*>{data[0]}, n, schedule.device())[0] != 0
                               : hasNonFinite(data[0], n);
  stats.bytesSent = schedule.bytesSent();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

std::unique_ptr<AllReduceAlgorithm> makeAllReduce(const AllReduceOptions& options,
                                                  std::shared_ptr<const precision::Codec> codec) {
  // Over device buffers the schedules call the codec's device form.
  const auto place = [&](std::shared_ptr<const precision::Codec> c) -> std::shared_ptr<const precision::Codec> {
    if (!options.device.isCuda()) return c;
    return std::make_shared<precision::cuda::DeviceMemoryCodec>(std::move(c));
  };
  APS_CHECK(!options.device.isCuda() || options.kind != AllReduceKind::AllGather || !options.kahan,
            "comm allgather: Kahan summation runs on the host only (comm.kahan with device buffers)");
  std::unique_ptr<AllReduceAlgorithm> algorithm;
  if (options.kind == AllReduceKind::Native) {
    algorithm =
        std::make_unique<TwoShotAllReduce>(place(std::make_shared<Fp32WireCodec>()), "native", options.segmentBytes);
  } else {
    APS_CHECK(codec != nullptr, "comm {}: needs a wire codec", allReduceKindName(options.kind));
    codec = place(std::move(codec));
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
  algorithm->setDevice(options.device);
  return algorithm;
}

}  // namespace aps::comm
