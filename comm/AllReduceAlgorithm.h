#pragma once

#include "comm/ExchangeSchedule.h"
#include "comm/ScratchArena.h"
#include "comm/Transport.h"
#include "framework/core/EnumNames.h"
#include "precision/Codec.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace aps::comm {

// What one all-reduce reports.
struct SyncStats {
  double seconds = 0.0;
  // Bytes each local rank put on the wire (index = rank - firstLocalRank()).
  std::vector<uint64_t> bytesSent;
  // Some rank's input held a NaN or an infinity, or the reduced result does; the same
  // answer on every rank.
  bool nonFinite = false;

  uint64_t maxBytesSent() const;
};

enum class AllReduceKind {
  Ring,       // reduce-scatter, decode-add-encode at every hop, all-gather of encoded chunks
  TwoShot,    // all-to-all of encoded chunks, fp32 sum in rank order, one encode, all-gather
  AllGather,  // all-gather every rank's encoded gradient, every rank sums in rank order
  Native,     // fixed-order fp32 two-shot (raw fp32 on the wire): the reproducible baseline
};
inline constexpr EnumNames<AllReduceKind, 4> kAllReduceKindNames{{"ring", "two_shot", "allgather", "native"}};
static_assert(kAllReduceKindNames.covers(AllReduceKind::Native), "one name per AllReduceKind");

std::string_view allReduceKindName(AllReduceKind kind);
// "ring", "two_shot", "allgather", "native"; throws aps::Error naming the value otherwise.
AllReduceKind parseAllReduceKind(std::string_view name);

// Wire bytes per pipelined segment of a two_shot (or native) chunk, i.e. per message of a
// pipelined round: 1 MiB is 256 Ki fp32 values, 1 Mi values of an 8-bit and 2 Mi of a 4-bit
// format, and a round of N ranks moves N - 1 such messages per rank. Every round costs a
// rendezvous with each peer (MPI's TCP transport hands large messages over only once both
// sides are inside an MPI call), so shorter segments lost more to synchronisation than they
// gained in overlap on the emulated 1 Gbit/s cluster (256 KiB messages: e2m1 slower than
// without pipelining); 1 MiB keeps the compute the pipeline cannot hide (encoding the first
// segment, decoding the last) to a few milliseconds (docs/ALGORITHMS.md, Pipelined two_shot).
inline constexpr int64_t kDefaultSegmentBytes = int64_t{1} << 20;

struct AllReduceOptions {
  AllReduceKind kind = AllReduceKind::TwoShot;
  // allgather: round the running sum to the wire format after every add, as the APS
  // artifact does (Han et al., ISC 2021); false sums in fp32.
  bool roundEveryAdd = true;
  // allgather with roundEveryAdd: Kahan-compensated summation in the wire format.
  bool kahan = false;
  // Detect NaN/inf with one tiny extra round (a byte per rank).
  bool checkFinite = true;
  // two_shot and native: wire bytes per pipelined segment of a chunk (0: no pipelining, one
  // segment per chunk). The result does not depend on it.
  int64_t segmentBytes = kDefaultSegmentBytes;
  // Where the buffers given to run() lie. cuda:N: device memory, reduced by the same schedules
  // with the codec's device form (precision::cuda::DeviceMemoryCodec), scratch from the caching
  // allocator and the non-finite checks and input shifts as device kernels, all on the device's
  // default stream; for a transport whose messages are device memory: one local rank (a
  // Communicator: NCCL's) or a simulated world on one device (SimTransport with a device). The
  // bits are the CPU's.
  Device device = Device::cpu();
};

// A sum all-reduce over the ranks of a Transport, written once as a schedule over per-rank
// buffers. Every rank ends with identical bits, and the bits do not depend on whether the
// ranks are real (MPI) or simulated.
class AllReduceAlgorithm {
 public:
  virtual ~AllReduceAlgorithm() = default;

  virtual std::string name() const = 0;

  // data[i] holds n floats of local rank transport.firstLocalRank() + i, replaced by the
  // sum over all ranks. `ctx` seeds stochastic rounding; vary its stream per call.
  // Calls on one algorithm object are serialised (they share its scratch memory).
  // `observer` (may be null) sees every encode of this rank's schedule (the fidelity probe);
  // it does not change the result. `resultInFirstOnly`: only data[0] need hold the sum
  // afterwards (the other buffers may keep anything), which spares simulated ranks a copy of
  // the whole buffer each. `inputsSummedInFirst` (only where sumsInputsAhead()): the caller has
  // already folded every rank's input into data[0] with foldInput, in rank order, and the
  // other buffers are not read. `inputs` (may be null): what the hooks before the reduction
  // found out (InputFacts::nonFinite, in place of the algorithm's own pass over the inputs) and
  // the scalings they left for it to apply (InputFacts::shifts: the result is the sum of the
  // scaled inputs, as if the buffers had been scaled first; which they may or may not be after).
  SyncStats run(Transport& transport, std::span<float* const> data, int64_t n, const precision::EncodeContext& ctx = {},
                EncodeObserver* observer = nullptr, bool resultInFirstOnly = false, bool inputsSummedInFirst = false,
                const InputFacts* inputs = nullptr) const;

  // Whether, on a transport holding every rank in one address space (the simulator), the
  // ranks' inputs can be summed before run() as they become ready (GradientReducer folds
  // each simulated rank's gradient while backward still runs, instead of keeping 256 copies
  // and summing them after): true where the result is an fp32 sum of the inputs in rank order,
  // as foldInput computes it, and nothing else reads the inputs (no observer may see them).
  virtual bool sumsInputsAhead() const { return false; }
  // Whether, on the simulator, run() can read simulated ranks' inputs from sticky 16-bit keys
  // (InputFacts::sticky16) exactly: where it encodes each sender's values as it reads them
  // and the codec rounds keys as it rounds the values (Codec::roundsSticky16Exactly).
  virtual bool readsSticky16Inputs() const { return false; }
  // acc (n) <- the fold of the next rank's input into the running sum (rank 0's: `first`),
  // exactly as run() would add it. Only where sumsInputsAhead().
  virtual void foldInput(float* acc, const float* input, int64_t n, bool first) const;

  bool checksFinite() const { return checkFinite_; }
  void setCheckFinite(bool check) { checkFinite_ = check; }
  // AllReduceOptions::device; makeAllReduce sets it with the codec's device form.
  Device device() const { return scratch_.device(); }
  void setDevice(Device device) { scratch_ = ScratchArena(device); }

 protected:
  virtual void reduce(ExchangeSchedule& schedule, std::span<float* const> data, int64_t n) const = 0;
  // Whether a NaN or inf in any rank's input always leaves one in the result: every result
  // value is then an fp32 sum of the inputs' values as they are (fp32 on the wire), and the
  // check of the result alone flags every non-finite input; the inputs' check, a pass over
  // every rank's buffer and a round, is skipped. false: the wire may lose them (E2M1
  // saturates an inf or a NaN to 6).
  virtual bool resultKeepsNonFinite() const { return false; }
  // Whether reduce() on this schedule applies the schedule's input shifts itself
  // (ExchangeSchedule::inputShifts) as it reads the inputs; false: run() scales the buffers in
  // place first and hands reduce() none.
  virtual bool appliesInputShifts(const ExchangeSchedule& /*schedule*/) const { return false; }

 private:
  bool checkFinite_ = true;
  mutable std::mutex mutex_;
  mutable ScratchArena scratch_;
};

// The algorithm `options.kind` on `codec` (ignored by Native, which sends raw fp32; may
// then be null), over buffers on `options.device`.
std::unique_ptr<AllReduceAlgorithm> makeAllReduce(const AllReduceOptions& options,
                                                  std::shared_ptr<const precision::Codec> codec);

}  // namespace aps::comm
