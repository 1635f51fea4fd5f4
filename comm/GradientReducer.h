#pragma once

#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketLayout.h"
#include "comm/Transport.h"
#include "framework/tensor/Buffer.h"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace aps::cuda {
class DeviceScratch;
class Event;
class Stream;
}

namespace aps::comm {

// A parameter's gradient as the reducer sees it: a name for messages and a plain fp32 buffer.
struct NamedGradient {
  std::string name;
  BufferView grad;
};

// What a bucket hook sees, on the communication thread.
struct BucketContext {
  int bucket = 0;
  const BucketLayout::Bucket* layout = nullptr;  // parameters and their offsets
  Transport* transport = nullptr;                // the all-reduce's
  std::span<float* const> data = {};             // the flat buffer of each local rank
  uint64_t step = 0;
  // data[0] already holds the fp32 sum of every rank's input, folded in rank order as
  // backward produced them (GradientReducer on the simulator); the other buffers hold nothing.
  bool inputsSummedInFirst = false;
  // Where the hooks before the reduction may record InputFacts (null: nowhere to record, and
  // a scaling hook scales the buffers in place).
  InputFacts* inputs = nullptr;
  // Each local rank's largest |value| of each of the bucket's parameters as fp32 bits
  // (kernels::absBits: above 0x7f800000 - 1 an inf or a NaN), measured as markReady copied the
  // gradients into the bucket: [localRank * params + k]. Empty where unknown (a gradient not
  // copied, the buffers pre-divided) or no longer true (a hook changed the values: the hook
  // chain drops it, BucketHook::changesValues).
  std::span<const uint32_t> maxAbsBits = {};
  // Set where the reducer keeps simulated ranks' inputs as 16-bit keys (GradientReducer,
  // "Sticky copies"): their data[i] are null, and the reduction reads these instead.
  const Sticky16Inputs* sticky16 = nullptr;
  // Where data lies. Device memory: a GPU's reducer (NCCL's one local rank, or a simulated world
  // on the device), whose all-reduce runs there; a hook that reads values on the host gets a
  // host copy (BucketScaling).
  Device device = Device::cpu();
  // The transport of tiny agreements in host memory (comm/SmallAllReduce.h) where `transport`
  // moves device memory (NCCL: the MPI world beside it; a SimTransport on the device: the host
  // one); null: `transport` itself.
  Transport* agreements = nullptr;
  Transport& agreementTransport() const { return agreements != nullptr ? *agreements : *transport; }
};
// What runs around a bucket's all-reduce at one level of the reduction, on the communication
// thread: the reducer's hook point, as a c10d comm hook is DDP's. BucketScaling
// (comm/BucketScaling.h) is the one aps installs: a chain of BucketHooks (scaling, error
// feedback, statistics, the fidelity probe). A hook must do the same on every rank and agree
// with other ranks only through comm::smallAllReduce on the bucket's transport.
class ReductionHook {
 public:
  virtual ~ReductionHook() = default;
  // Before the all-reduce, on every local rank's buffer: e.g. APS (Han et al., ISC 2021)
  // agrees on per-layer exponents with smallAllReduce(Max) and scales by exact powers of two.
  // It may record InputFacts where BucketContext::inputs is set.
  virtual void beforeReduce(const BucketContext& bucket) = 0;
  // After it, on the result (local rank 0's buffer alone under ReducerOptions::resultInFirstOnly):
  // e.g. APS undoes its scaling.
  virtual void afterReduce(const BucketContext& bucket) = 0;
  // Asked after beforeReduce: who observes this bucket's encodes (the fidelity probe, the
  // statistics); null for none.
  virtual EncodeObserver* encodeObserver(const BucketContext& /*bucket*/) { return nullptr; }
  // Whether this hook reads or changes the ranks' buffers of a bucket of this wire format
  // (scaling, error feedback, statistics, a probe). Where it does not, the reducer may sum
  // simulated ranks' gradients as they arrive (AllReduceAlgorithm::sumsInputsAhead).
  virtual bool readsInputs(int /*format*/) const { return true; }
  // Whether, for buckets of this wire format, it reads only local rank 0's buffer and the
  // measured maxima (BucketContext::maxAbsBits), says whether any input is NaN or infinite
  // (InputFacts::nonFinite: APS does), and observes no encode of the inputs
  // (EncodeObserver::Site::Input): then the reducer may keep the other simulated ranks'
  // gradients as sticky 16-bit keys.
  virtual bool readsFirstRankOnly(int /*format*/) const { return false; }
};

struct ReducerOptions {
  size_t bucketCapBytes = BucketLayout::kDefaultCapBytes;
  size_t firstBucketCapBytes = BucketLayout::kDefaultFirstCapBytes;
  // true: a bucket is reduced as soon as its last gradient is marked ready, overlapping
  // backward; false: everything is reduced inside wait(), after backward.
  bool overlap = true;
  // Divide the sums by the world size (the data-parallel mean).
  bool average = false;
  // With average: divide every rank's gradient by the world size before the hooks and the
  // quantisation instead of the sum after (the APS artifact divides its loss by N, so it
  // quantizes g / N); no division after the reduction then.
  bool preDivide = false;
  // Seeds stochastic rounding; each step and bucket gets its own stream.
  uint64_t seed = 0;
  // The hook around each bucket's all-reduce (null: none). Not owned: it must outlive the
  // reducer. Hierarchical reduction: the hook of each group's level.
  ReductionHook* hook = nullptr;
  // Hierarchical reduction (docs/ALGORITHMS.md, Hierarchical APS) when > 0: each group of
  // groupSize consecutive ranks reduces the bucket (hook, the algorithm, on a sub-world of the
  // group: APS agrees and takes its headroom within the group); then the group leaders (ranks
  // 0, G, 2G, ...) reduce the groups' fp32 sums the same way with leaderHook; then each leader
  // sends its fp32 result to the rest of its group. Must divide the world size; 0: one flat
  // reduction over all ranks.
  int groupSize = 0;
  ReductionHook* leaderHook = nullptr;
  // Hierarchical reduction: what runs around the whole of it with the world's BucketContext
  // (the fidelity probe: the exact sum over every rank before the first level, the comparison
  // after the result reached every rank). Its encodeObserver is not asked.
  ReductionHook* worldHook = nullptr;
  // Flat reduction (groupSize 0): only local rank 0's buffer need hold the result; the
  // hook's afterReduce (given that buffer alone) and the mean then run on it once instead of
  // once per simulated rank. The reducer sets it, as it copies every rank's gradient from there.
  bool resultInFirstOnly = false;
  // Gradients on a GPU: the transport of the hooks' tiny agreements in host memory (the MPI
  // world beside NCCL; BucketContext::agreements). Not owned.
  Transport* agreements = nullptr;
};

// One bucket's reduction, the same wherever buckets come from (GradientReducer here, a
// PyTorch DDP bucket in the Python module): options.hook's beforeReduce, the all-reduce of
// every local rank's flat buffer with stochastic rounding seeded by (options.seed, step,
// bucket), the hook's afterReduce, then the mean when options.average (taken before the hooks instead with
// options.preDivide). The buffers hold the result (local rank 0's alone with
// options.resultInFirstOnly).
SyncStats reduceBucket(const AllReduceAlgorithm& algorithm, const BucketContext& bucket, const ReducerOptions& options);

// What one step's gradient synchronisation cost.
struct StepCommStats {
  // Time wait() blocked the optimizer step. Gradients on a GPU: the time from the end of
  // backward's kernels to the end of the reduction's on the device (zero where the reduction
  // finished first), measured with timing events and read at the next wait(), so each step
  // reports the step before's (the first step 0).
  double exposedSeconds = 0.0;
  double commSeconds = 0.0;         // time the communication thread spent reducing buckets
  std::vector<uint64_t> bytesSent;  // per local rank
  bool nonFinite = false;           // some gradient was NaN/inf on some rank (same on all)
  int buckets = 0;
};

// Data-parallel gradient synchronisation in flat buckets (docs/ARCHITECTURE.md, "Overlapping
// communication with backward"). The engine's gradient-ready hook calls markReady(p) as
// backward produces parameter p's gradient; when a bucket's last gradient arrives it is
// queued to the one communication thread, which owns every call into the transport and
// reduces buckets strictly in bucket order (the same order on every rank, whatever order
// hooks fire in). wait() blocks the optimizer step until all buckets are reduced and the
// reduced gradients are back in the parameters' buffers.
//
// Gradients on a GPU (a transport of device memory: NCCL's one local rank, or a SimTransport
// on the device; neither folds nor keeps sticky keys): the buckets are device memory, markReady queues the copy and the
// measure of each gradient's largest magnitude on the marking thread's current stream (the default stream, after the
// kernels that made it) and records the bucket's event there once the bucket is complete. The communication thread
// queues everything else on the reducer's own communication stream (cuda::StreamGuard), which waits for that event
// alone: the bucket's reduction, its copies back into the gradients included, runs beside backward's later kernels.
// NCCL's calls from that thread are queued on that stream too (NcclCommunicator). Its host waits (a bucket's maxima
// read back, the non-finite flags, hooks' host copies) wait for the communication stream only. wait() makes the waiting
// thread's stream wait for the communication stream's work with an event, without waiting on the host. The all-reduce
// algorithms must run over device buffers (AllReduceOptions::device).
//
// Gradients are copied into the flat buckets at markReady and back after the reduction. With a SimTransport, every
// virtual rank registers its own gradients and marks them ready (markReady(p, localRank)); a bucket is queued once all
// local ranks have.
//
// Folding (the simulator, fp32 on the wire, no hook reading the buffers): a bucket whose
// algorithm sumsInputsAhead() does not keep every simulated rank's copy. Each parameter's
// gradients are folded into local rank 0's buffer in rank order as they are marked ready;
// a rank that comes before its predecessor is folded is copied to its own buffer (staged)
// and folded by whoever folds the rank before it. The sum is that of the unfolded run, bit
// for bit, and the memory traffic of 256 copies (written in backward, read after it) is gone.
//
// Sticky copies (the simulator, a bucket that is not folded, whose algorithm reads 16-bit keys
// exactly and whose hook allows it, ReductionHook::readsFirstRankOnly): local ranks other than 0
// keep their gradients as sticky 16-bit keys (precision::copyMaxAbsBitsSticky16), plus whole
// copies of any parameter that held fp32 subnormals; the reduction computes the same bits
// from half the memory traffic.
class GradientReducer {
 public:
  // grads[i]: the gradients of local rank transport.firstLocalRank() + i in registration
  // order (same names and sizes on every rank). formats[p] picks the all-reduce (and so the
  // wire format) of parameter p from `algorithms`; empty formats means algorithms[0] for all.
  GradientReducer(Transport& transport, std::vector<std::vector<NamedGradient>> grads,
                  std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms, std::vector<int> formats = {},
                  ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Thread-safe; each (param, localRank) once per step.
  void markReady(int param, int localRank = 0);
  // markReady with the gradient's values g read from `from` (its registered count of floats)
  // rather than from its registered buffer, which is neither read nor written: the simulator's
  // ranks other than 0 hand over backward's gradient (autograd::LeafHook::takeFirst), which would
  // have been written over a zeroed buffer as 0 + g. Keys are made as keys of 0 + g, copies
  // into the rank's bucket buffer are 0 + g, and a folded bucket folds or stages g itself (a -0
  // adds as +0 would to a sum that starts from rank 0's 0 + g). Returns false and marks
  // nothing for local rank 0, whose buffer may be the bucket's, and for gradients on a GPU: the
  // caller then writes the buffer and calls markReady.
  bool markReadyFrom(int param, int localRank, const float* from);
  // Blocks until every bucket of this step is reduced; rethrows a communication error.
  // Throws aps::Error naming a parameter that was never marked ready.
  StepCommStats wait();

  // Steps completed so far (it seeds each step's stochastic rounding); a resumed run sets it.
  void setStep(uint64_t step);

  // Buckets of the current step the communication thread has finished (progress, tests).
  int bucketsReduced();

  const BucketLayout& layout() const { return layout_; }
  // How the local ranks' gradients reach a bucket's buffers, chosen per bucket in one place
  // (chooseInput): copied by markReady, folded into local rank 0's buffer as they arrive, or
  // kept as sticky 16-bit keys for local ranks 1, 2, ... (see above). A gradient backward
  // hands over (markReadyFrom) takes the same path as one read from its registered buffer.
  enum class BucketInput : uint8_t { Copy, Fold, Sticky16 };
  BucketInput bucketInput(int bucket) const { return inputs_.at(static_cast<size_t>(bucket)); }
  // Whether bucket b is folded as its gradients arrive (see above).
  bool foldsBucket(int bucket) const { return bucketInput(bucket) == BucketInput::Fold; }
  // Whether bucket b keeps local ranks 1, 2, ... as sticky 16-bit keys (see above).
  bool keepsSticky16(int bucket) const { return bucketInput(bucket) == BucketInput::Sticky16; }
  int paramCount() const { return static_cast<int>(names_.size()); }

 private:
  void registerGradients(const std::vector<std::vector<NamedGradient>>& grads);
  BucketInput chooseInput(const BucketLayout::Bucket& bucket) const;
  void allocate();
  // Where parameter p's gradient lives in its bucket's flat buffer (local rank i).
  BufferView flatGradient(int param, int localRank);
  float* bucketBuffer(int bucket, int localRank);
  void commLoop();
  void reduceBucket(int b);
  // Folds (param, localRank) from `src`, then every staged rank after it; mutex_ not held.
  // markReady's work, the gradient's values read from `from` (handed: markReadyFrom's).
  void mark(int param, int localRank, const float* from, bool handed);
  void foldFrom(int param, int localRank, const float* src);
  // One (param, rank) gradient is in its bucket; queues a complete bucket. mutex_ held.
  bool arrivedLocked(int bucket);

  Transport& transport_;
  ReducerOptions options_;
  std::vector<std::string> names_;
  std::vector<std::vector<BufferView>> grads_;     // [local][param]
  std::vector<std::vector<uint8_t>> overwritten_;  // [local rank][param]: a later local rank writes it too
  std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms_;
  BucketLayout layout_;
  std::vector<std::vector<std::vector<float>>> flat_;  // [bucket][local][element]
  int local_;
  Device device_ = Device::cpu();  // where the gradients and buckets lie
  // On a GPU: each bucket's buffer of each local rank ([bucket * local + i]); each bucket's
  // gradients' largest |value| bits ([bucket][local * bucket params + k], as
  // BucketContext::maxAbsBits; k is BucketLayout::slotOf); the communication stream; each bucket's event (its gradients
  // copied, recorded by markReady); the event after the step's last bucket (wait()).
  std::vector<std::unique_ptr<cuda::DeviceScratch>> deviceFlat_;
  std::vector<std::unique_ptr<cuda::DeviceScratch>> deviceMaxBits_;
  std::unique_ptr<cuda::Stream> commStream_;
  std::vector<std::unique_ptr<cuda::Event>> bucketReady_;
  std::unique_ptr<cuda::Event> reduced_;
  std::unique_ptr<cuda::Event> backwardDone_;  // recorded on the waiting thread's stream by wait()
  bool exposurePending_ = false;               // the two events of the last step are recorded

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> pending_;         // gradients a bucket still waits for
  std::vector<uint8_t> marked_;      // [local * params + p]
  std::vector<uint8_t> queued_;      // bucket b is complete and waits for the thread
  std::vector<BucketInput> inputs_;  // [bucket]: how the ranks' gradients reach it (chooseInput)
  std::vector<int> nextFold_;        // [param]: the local rank whose gradient is folded next
  std::vector<uint8_t> staged_;      // [local * params + p]: copied to its own buffer, not yet folded
  // [local * params + p]: the copied gradient's largest kernels::absBits (host buckets; a GPU's
  // are deviceMaxBits_). Written by the marking thread outside the lock, read by the
  // communication thread once the bucket is queued.
  std::vector<uint32_t> maxAbsBits_;
  std::vector<uint8_t> measuresMaxima_;  // [bucket]: markReady copies (and measures) all of it
  // [local][param]: a whole copy of a sticky rank's gradient that held an fp32 subnormal this
  // step (wholeNow_ set), kept between steps so it is allocated once.
  std::vector<std::vector<std::vector<float>>> whole_;
  std::vector<uint8_t> wholeNow_;  // [local * params + p]
  int nextBucket_ = 0;             // next bucket the thread reduces this step
  int doneBuckets_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t step_ = 0;
  StepCommStats stepStats_;
  std::thread thread_;
};

}  // namespace aps::comm
