#include "comm/GradientReducer.h"

#include "comm/HierarchicalReduce.h"
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "precision/ApsScaler.h"
#include "precision/cuda/CodecKernels.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

namespace aps::comm {

namespace {

std::vector<int64_t> countsOf(const std::vector<std::vector<NamedGradient>>& grads) {
  std::vector<int64_t> counts;
  if (!grads.empty()) {
    for (const NamedGradient& g : grads[0]) counts.push_back(g.grad.count);
  }
  return counts;
}

std::vector<int> formatsOrDefault(std::vector<int> formats, size_t params) {
  if (formats.empty()) formats.assign(params, 0);
  return formats;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GradientReducer::GradientReducer(Transport& transport, std::vector<std::vector<NamedGradient>> grads,
                                 std::vector<std::shared_ptr<const AllReduceAlgorithm>> algorithms,
                                 std::vector<int> formats, ReducerOptions options)
    : transport_(transport),
      options_(options),
      algorithms_(std::move(algorithms)),
      layout_(countsOf(grads), formatsOrDefault(formats, grads.empty() ? 0 : grads[0].size()), options.bucketCapBytes,
              options.firstBucketCapBytes),
      local_(transport.localRankCount()) {
  options_.resultInFirstOnly = true;  // every rank's gradient is copied back from local rank 0's buffer
  APS_CHECK(grads.size() == static_cast<size_t>(local_), "comm reducer: got gradients of {} ranks for {} local ranks",
            grads.size(), local_);
  APS_CHECK(!algorithms_.empty(), "comm reducer: needs at least one all-reduce algorithm");
  for (const auto& a : algorithms_) APS_CHECK(a != nullptr, "comm reducer: null all-reduce algorithm");
  registerGradients(grads);
  if (device_.isCuda()) {
    APS_CHECK(local_ == 1 || transport.sharesMemory(),
              "comm reducer: gradients on {} are reduced by one rank per process or a simulated world (transport {} "
              "hosts {} ranks)",
              deviceName(device_), transport.transportName(), local_);
    for (const auto& a : algorithms_)
      APS_CHECK(a->device() == device_,
                "comm reducer: gradients on {} need an all-reduce over {} buffers ({} runs on {})", deviceName(device_),
                deviceName(device_), a->name(), deviceName(a->device()));
  }
  for (size_t p = 0; p < names_.size(); ++p) {
    const int f = layout_.buckets()[static_cast<size_t>(layout_.bucketOf(static_cast<int>(p)))].format;
    APS_CHECK(f >= 0 && static_cast<size_t>(f) < algorithms_.size(),
              "comm reducer: parameter '{}' uses format {} but {} algorithms were given", names_[p], f,
              algorithms_.size());
  }
  for (size_t b = 0; b < layout_.buckets().size(); ++b) inputs_.push_back(chooseInput(layout_.buckets()[b]));
  allocate();
  thread_ = std::thread([this] { commLoop(); });
}

// Every local rank's gradients, checked against rank 0's names and sizes, and which (rank,
// parameter) destinations a later local rank writes again.
void GradientReducer::registerGradients(const std::vector<std::vector<NamedGradient>>& grads) {
  const size_t params = grads[0].size();
  for (const NamedGradient& g : grads[0]) names_.push_back(g.name);
  for (size_t i = 0; i < grads.size(); ++i) {
    APS_CHECK(grads[i].size() == params, "comm reducer: local rank {} registers {} parameters, rank 0 {}", i,
              grads[i].size(), params);
    std::vector<BufferView> views;
    for (size_t p = 0; p < params; ++p) {
      const NamedGradient& g = grads[i][p];
      APS_CHECK(g.name == names_[p] && g.grad.count == grads[0][p].grad.count,
                "comm reducer: parameter {} of local rank {} is '{}' ({} values), expected '{}' ({} values)", p, i,
                g.name, g.grad.count, names_[p], grads[0][p].grad.count);
      APS_CHECK(g.grad.dtype == DType::Float32, "comm reducer: gradient '{}' must be float32", g.name);
      APS_CHECK(g.grad.device == grads[0][0].grad.device, "comm reducer: gradient '{}' is on {}, '{}' on {}", g.name,
                deviceName(g.grad.device), grads[0][0].name, deviceName(grads[0][0].grad.device));
      APS_CHECK(g.grad.count == 0 || g.grad.data != nullptr, "comm reducer: gradient '{}' has no data", g.name);
      views.push_back(g.grad);
    }
    grads_.push_back(std::move(views));
  }
  if (params > 0) device_ = grads[0][0].grad.device;
  overwritten_.assign(grads_.size(), std::vector<uint8_t>(params, 0));
  for (size_t p = 0; p < params; ++p) {
    std::unordered_set<const void*> later;
    for (size_t i = grads_.size(); i-- > 0;) {
      const void* d = grads_[i][p].data;
      overwritten_[i][p] = later.count(d) ? 1 : 0;
      later.insert(d);
    }
  }
}

// The one place that decides how simulated ranks' gradients reach a bucket. Folding and sticky
// keys need every rank of the world here, in one address space, and a flat reduction of the
// undivided values (pre-division scales each rank's buffer). Folding also needs hooks that do
// not read the inputs and an algorithm that may sum them ahead; sticky keys, hooks that allow
// them and an algorithm that reads keys exactly.
GradientReducer::BucketInput GradientReducer::chooseInput(const BucketLayout::Bucket& b) const {
  const bool wholeWorldHere = local_ > 1 && local_ == transport_.worldSize() && transport_.sharesMemory() &&
                              options_.groupSize == 0 && !(options_.average && options_.preDivide) && device_.isCpu();
  if (!wholeWorldHere) return BucketInput::Copy;
  const AllReduceAlgorithm& algorithm = *algorithms_[static_cast<size_t>(b.format)];
  const ReductionHook* hook = options_.hook;
  if ((hook == nullptr || !hook->readsInputs(b.format)) && algorithm.sumsInputsAhead()) return BucketInput::Fold;
  if (hook != nullptr && hook->readsFirstRankOnly(b.format) && algorithm.readsSticky16Inputs())
    return BucketInput::Sticky16;
  return BucketInput::Copy;
}

// The buckets' flat buffers (sticky keys of local rank i >= 1 fill its buffer's first half),
// the per-step bookkeeping, and which buckets' maxima markReady measures.
void GradientReducer::allocate() {
  const size_t params = names_.size();
  for (const BucketLayout::Bucket& b : layout_.buckets())
    pending_.push_back(static_cast<int>(b.params.size()) * local_);
  marked_.assign(params * static_cast<size_t>(local_), 0);
  queued_.assign(layout_.buckets().size(), 0);
  for (size_t k = 0; k < layout_.buckets().size(); ++k) {
    const BucketLayout::Bucket& b = layout_.buckets()[k];
    const bool keys = inputs_[k] == BucketInput::Sticky16;
    flat_.emplace_back();
    if (device_.isCuda()) {  // [bucket * local + i]
      for (int i = 0; i < local_; ++i)
        deviceFlat_.push_back(
            std::make_unique<cuda::DeviceScratch>(static_cast<size_t>(b.count) * sizeof(float), device_.index));
      deviceMaxBits_.push_back(std::make_unique<cuda::DeviceScratch>(
          b.params.size() * static_cast<size_t>(local_) * sizeof(uint32_t), device_.index));
      bucketReady_.push_back(std::make_unique<cuda::Event>());
      continue;
    }
    for (int i = 0; i < local_; ++i)
      flat_.back().emplace_back(static_cast<size_t>(keys && i > 0 ? (b.count + 1) / 2 : b.count), 0.0f);
  }
  if (device_.isCuda()) {
    commStream_ = std::make_unique<cuda::Stream>(device_.index);
    reduced_ = std::make_unique<cuda::Event>(true);
    backwardDone_ = std::make_unique<cuda::Event>(true);
  }
  whole_.assign(static_cast<size_t>(local_), std::vector<std::vector<float>>(params));
  wholeNow_.assign(params * static_cast<size_t>(local_), 0);
  nextFold_.assign(params, 0);
  staged_.assign(params * static_cast<size_t>(local_), 0);
  if (!device_.isCuda()) maxAbsBits_.assign(params * static_cast<size_t>(local_), 0);  // a GPU's: deviceMaxBits_
  // markReady measures what it copies: a bucket's maxima are known each step where it copies
  // every rank's gradient of the bucket (an unfolded bucket whose gradients live elsewhere).
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    bool copied = inputs_[b] != BucketInput::Fold;
    for (int i = 0; i < local_ && copied; ++i) {
      for (int p : layout_.buckets()[b].params) {
        copied = copied && ((inputs_[b] == BucketInput::Sticky16 && i > 0) ||
                            grads_[static_cast<size_t>(i)][static_cast<size_t>(p)].data != flatGradient(p, i).data);
      }
    }
    measuresMaxima_.push_back(copied ? 1 : 0);
    APS_ASSERT(inputs_[b] != BucketInput::Sticky16 || copied);  // buffers made here never hold a caller's gradient
  }
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // The buffers go back to the caching allocator: the communication stream must be done with them.
  if (commStream_) commStream_->synchronize();
}

BufferView GradientReducer::flatGradient(int param, int localRank) {
  APS_CHECK(param >= 0 && param < paramCount(), "comm reducer: no parameter {}", param);
  APS_CHECK(localRank >= 0 && localRank < local_, "comm reducer: no local rank {}", localRank);
  const int b = layout_.bucketOf(param);
  float* base = bucketBuffer(b, localRank);
  return {base + layout_.offsetOf(param), grads_[0][static_cast<size_t>(param)].count, DType::Float32, device_};
}

float* GradientReducer::bucketBuffer(int bucket, int localRank) {
  const auto b = static_cast<size_t>(bucket);
  if (device_.isCuda())
    return static_cast<float*>(deviceFlat_[b * static_cast<size_t>(local_) + static_cast<size_t>(localRank)]->data());
  return flat_[b][static_cast<size_t>(localRank)].data();
}

int GradientReducer::bucketsReduced() {
  std::lock_guard<std::mutex> lock(mutex_);
  return doneBuckets_;
}

void GradientReducer::setStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
}

void GradientReducer::markReady(int param, int localRank) {
  APS_CHECK(param >= 0 && param < paramCount(), "comm reducer: markReady of unknown parameter {}", param);
  APS_CHECK(localRank >= 0 && localRank < local_, "comm reducer: markReady for unknown local rank {}", localRank);
  mark(param, localRank,
       static_cast<const float*>(grads_[static_cast<size_t>(localRank)][static_cast<size_t>(param)].data), false);
}

bool GradientReducer::markReadyFrom(int param, int localRank, const float* from) {
  APS_CHECK(param >= 0 && param < paramCount(), "comm reducer: markReadyFrom of unknown parameter {}", param);
  APS_CHECK(localRank >= 0 && localRank < local_, "comm reducer: markReadyFrom for unknown local rank {}", localRank);
  if (localRank == 0 || device_.isCuda()) return false;
  mark(param, localRank, from, true);
  return true;
}

void GradientReducer::mark(int param, int localRank, const float* from, bool handed) {
  const auto p = static_cast<size_t>(param);
  const int b = layout_.bucketOf(param);
  const bool keys = inputs_[static_cast<size_t>(b)] == BucketInput::Sticky16 && localRank > 0;
  const BufferView slot = keys ? BufferView{} : flatGradient(param, localRank);  // keys: not floats
  const int64_t count = grads_[static_cast<size_t>(localRank)][p].count;
  const bool fold = inputs_[static_cast<size_t>(b)] == BucketInput::Fold;
  bool foldNow = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint8_t& flag = marked_[static_cast<size_t>(localRank) * names_.size() + p];
    APS_CHECK(flag == 0, "comm reducer: gradient '{}' (local rank {}) marked ready twice in one step", names_[p],
              localRank);
    flag = 1;
    foldNow = fold && nextFold_[p] == localRank;
  }
  if (foldNow) {  // its predecessor is folded: fold it from where backward left it
    foldFrom(param, localRank, from);
    return;
  }
  // Copy outside the lock: hooks of different parameters may run concurrently. The copy
  // measures the largest |value| on the way, for APS (BucketContext::maxAbsBits).
  const size_t at = static_cast<size_t>(localRank) * names_.size() + p;
  if (device_.isCuda()) {  // queued after the kernels that made the gradient (this thread's stream)
    const size_t slotAt = static_cast<size_t>(localRank) * layout_.buckets()[static_cast<size_t>(b)].params.size() +
                          layout_.slotOf(param);
    cuda::copyAsync(slot.data, from, slot.bytes(), cuda::CopyKind::DeviceToDevice, cuda::currentStream());
    precision::cuda::absMaxBits(static_cast<const float*>(slot.data), count,
                                static_cast<uint32_t*>(deviceMaxBits_[static_cast<size_t>(b)]->data()) + slotAt,
                                cuda::currentStream());
  } else if (keys) {
    auto* to = reinterpret_cast<uint16_t*>(flat_[static_cast<size_t>(b)][static_cast<size_t>(localRank)].data()) +
               layout_.offsetOf(param);
    bool subnormals = false;
    maxAbsBits_[at] = precision::copyMaxAbsBitsSticky16(to, from, count, &subnormals);
    wholeNow_[at] = subnormals ? 1 : 0;
    if (subnormals) {  // 0 + x, as the keys are (markReadyFrom's values may hold -0)
      std::vector<float>& whole = whole_[static_cast<size_t>(localRank)][p];
      whole.resize(static_cast<size_t>(count));
      precision::copyPlusZeroMaxAbsBits(whole.data(), from, count);  // the maximum is the keys'
    }
  } else if (handed && !fold) {  // 0 + g, what the registered buffer would have held
    maxAbsBits_[at] = precision::copyPlusZeroMaxAbsBits(static_cast<float*>(slot.data), from, count);
  } else if (from != slot.data) {
    maxAbsBits_[at] = precision::copyMaxAbsBits(static_cast<float*>(slot.data), from, count);
  }
  bool queue = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fold) {
      // Staged: the rank folding its predecessor folds it too, unless that one has just
      // finished (and found it not staged yet).
      staged_[static_cast<size_t>(localRank) * names_.size() + p] = 1;
      foldNow = nextFold_[p] == localRank;
    } else {
      queue = arrivedLocked(b);
      // Every copy into the bucket is queued (each before its arrival): the communication
      // stream starts the bucket after this event.
      if (device_.isCuda() && pending_[static_cast<size_t>(b)] == 0)
        bucketReady_[static_cast<size_t>(b)]->record(cuda::currentStream());
    }
  }
  if (foldNow) foldFrom(param, localRank, static_cast<const float*>(slot.data));
  if (queue) cv_.notify_all();
}

bool GradientReducer::arrivedLocked(int bucket) {
  if (--pending_[static_cast<size_t>(bucket)] != 0 || !options_.overlap) return false;
  queued_[static_cast<size_t>(bucket)] = 1;
  return true;
}

void GradientReducer::foldFrom(int param, int localRank, const float* src) {
  const auto p = static_cast<size_t>(param);
  const int b = layout_.bucketOf(param);
  const AllReduceAlgorithm& algorithm =
      *algorithms_[static_cast<size_t>(layout_.buckets()[static_cast<size_t>(b)].format)];
  float* acc = static_cast<float*>(flatGradient(param, 0).data);
  const int64_t count = grads_[0][p].count;
  bool queue = false;
  for (int rank = localRank;;) {
    if (count > 0) algorithm.foldInput(acc, src, count, rank == 0);
    std::lock_guard<std::mutex> lock(mutex_);
    nextFold_[p] = rank + 1;
    queue = arrivedLocked(b) || queue;
    ++rank;
    if (rank == local_ || staged_[static_cast<size_t>(rank) * names_.size() + p] == 0) break;
    src = static_cast<const float*>(flatGradient(param, rank).data);
  }
  if (queue) cv_.notify_all();
}

StepCommStats GradientReducer::wait() {
  const auto start = std::chrono::steady_clock::now();
  const int buckets = static_cast<int>(layout_.buckets().size());
  double deviceExposed = 0.0;
  if (device_.isCuda()) {  // only the waiting thread touches these: not under the lock
    // The last step's exposure on the device: both events have long been reached.
    if (exposurePending_) {
      reduced_->synchronize();
      backwardDone_->synchronize();
      deviceExposed = std::max(0.0, static_cast<double>(reduced_->millisecondsSince(*backwardDone_)) / 1000.0);
      exposurePending_ = false;
    }
    // Backward's kernels are all queued on this thread's stream by now.
    backwardDone_->record(cuda::currentStream());
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (int b = 0; b < buckets; ++b) {
    if (pending_[static_cast<size_t>(b)] == 0) continue;
    for (int i = 0; i < local_; ++i) {
      for (int p : layout_.buckets()[static_cast<size_t>(b)].params) {
        APS_CHECK(marked_[static_cast<size_t>(i) * names_.size() + static_cast<size_t>(p)] != 0,
                  "comm reducer: wait() before the gradient of '{}' (local rank {}) was marked ready",
                  names_[static_cast<size_t>(p)], i);
      }
    }
  }
  if (!options_.overlap) {
    for (auto& q : queued_) q = 1;
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return doneBuckets_ == buckets; });
  if (error_) std::rethrow_exception(error_);
  if (device_.isCuda()) {  // what follows on this thread's stream (the optimizer) comes after the reduction
    reduced_->record(commStream_->handle());
    reduced_->wait(cuda::currentStream());
    exposurePending_ = true;
  }
  StepCommStats stats = stepStats_;
  stats.buckets = buckets;
  stepStats_ = {};
  for (size_t b = 0; b < pending_.size(); ++b) {
    pending_[b] = static_cast<int>(layout_.buckets()[b].params.size()) * local_;
    queued_[b] = 0;
  }
  std::fill(marked_.begin(), marked_.end(), 0);
  std::fill(nextFold_.begin(), nextFold_.end(), 0);
  std::fill(staged_.begin(), staged_.end(), 0);
  nextBucket_ = 0;
  doneBuckets_ = 0;
  ++step_;
  lock.unlock();
  stats.exposedSeconds = device_.isCuda() ? deviceExposed : secondsSince(start);
  return stats;
}

void GradientReducer::commLoop() {
  const int buckets = static_cast<int>(layout_.buckets().size());
  if (device_.isCuda()) cuda::setDevice(device_.index);  // the device is per thread
  // On a GPU every device call of the reduction goes on the communication stream.
  std::optional<cuda::StreamGuard> onCommStream;
  if (commStream_) onCommStream.emplace(commStream_->handle());
  for (;;) {
    int b = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || (nextBucket_ < buckets && queued_[static_cast<size_t>(nextBucket_)]); });
      if (stop_) return;
      b = nextBucket_;
    }
    try {
      reduceBucket(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      nextBucket_ = buckets;
      doneBuckets_ = buckets;
      cv_.notify_all();
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      nextBucket_ = b + 1;
      ++doneBuckets_;
    }
    cv_.notify_all();
  }
}

SyncStats reduceBucket(const AllReduceAlgorithm& algorithm, const BucketContext& bucket,
                       const ReducerOptions& options) {
  Transport& transport = *bucket.transport;
  const int64_t n = bucket.layout->count;
  const precision::EncodeContext ctx{options.seed, bucket.step * 1000003ull + static_cast<uint64_t>(bucket.bucket), 0};
  const auto divide = [&](std::span<float* const> buffers) {
    const auto world = static_cast<float>(transport.worldSize());
    for (float* d : buffers) {
      if (bucket.device.isCuda()) {
        precision::cuda::divideBy(d, n, world, cuda::currentStream());
        continue;
      }
      for (int64_t i = 0; i < n; ++i) d[i] /= world;
    }
  };
  if (options.average && options.preDivide) divide(bucket.data);
  SyncStats sync;
  std::span<float* const> results = bucket.data;
  if (options.groupSize > 0) {
    sync = reduceBucketHierarchical(algorithm, bucket, options, ctx);
  } else {
    InputFacts facts;
    facts.sticky16 = bucket.sticky16;
    BucketContext hooked = bucket;
    hooked.inputs = &facts;
    if (options.average && options.preDivide) hooked.maxAbsBits = {};  // measured before the division
    if (options.hook) options.hook->beforeReduce(hooked);
    EncodeObserver* observer = options.hook ? options.hook->encodeObserver(bucket) : nullptr;
    sync = algorithm.run(transport, bucket.data, n, ctx, observer, options.resultInFirstOnly,
                         bucket.inputsSummedInFirst, &facts);
    // Every local rank holds the same sum: what follows needs only one copy of it.
    BucketContext result = bucket;
    if (options.resultInFirstOnly) result.data = results = bucket.data.first(std::min<size_t>(1, bucket.data.size()));
    if (options.hook) options.hook->afterReduce(result);
  }
  if (options.average && !options.preDivide) divide(results);
  return sync;
}

void GradientReducer::reduceBucket(int b) {
  const BucketLayout::Bucket& bucket = layout_.buckets()[static_cast<size_t>(b)];
  const auto start = std::chrono::steady_clock::now();
  std::vector<float*> data;
  for (int i = 0; i < local_; ++i) data.push_back(bucketBuffer(b, i));
  // Sticky copies: ranks >= 1 read from their keys (and the whole copies of this step).
  Sticky16Inputs sticky;
  const bool keys = inputs_[static_cast<size_t>(b)] == BucketInput::Sticky16;
  if (keys) {
    sticky.keys.assign(data.size(), nullptr);
    sticky.exact.resize(data.size());
    for (size_t i = 1; i < data.size(); ++i) {
      sticky.keys[i] = reinterpret_cast<const uint16_t*>(data[i]);
      data[i] = nullptr;
      // A bucket's offsets ascend with its parameters: the ranges come out in order.
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const auto p = static_cast<size_t>(bucket.params[k]);
        uint8_t& now = wholeNow_[i * names_.size() + p];
        if (now == 0) continue;
        sticky.exact[i].push_back({bucket.offsets[k], static_cast<int64_t>(whole_[i][p].size()), whole_[i][p].data()});
        now = 0;
      }
    }
  }
  uint64_t step = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step = step_;
  }
  BucketContext context{b, &bucket, &transport_, data, step, inputs_[static_cast<size_t>(b)] == BucketInput::Fold};
  if (keys) context.sticky16 = &sticky;
  context.device = device_;
  context.agreements = options_.agreements;
  // Every local rank's maxima of the bucket's parameters, measured by markReady's copies. On a
  // GPU: after the bucket's copies (its event), read back (a wait for the communication stream).
  std::vector<uint32_t> maxAbsBits;
  if (device_.isCuda()) {
    bucketReady_[static_cast<size_t>(b)]->wait(commStream_->handle());
    if (measuresMaxima_[static_cast<size_t>(b)]) {
      maxAbsBits.resize(data.size() * bucket.params.size());
      cuda::copySync(maxAbsBits.data(), deviceMaxBits_[static_cast<size_t>(b)]->data(),
                     maxAbsBits.size() * sizeof(uint32_t), cuda::CopyKind::DeviceToHost);
    }
  } else if (measuresMaxima_[static_cast<size_t>(b)]) {
    for (size_t i = 0; i < data.size(); ++i)
      for (int p : bucket.params) maxAbsBits.push_back(maxAbsBits_[i * names_.size() + static_cast<size_t>(p)]);
  }
  if (measuresMaxima_[static_cast<size_t>(b)]) context.maxAbsBits = maxAbsBits;
  const SyncStats sync = comm::reduceBucket(*algorithms_[static_cast<size_t>(bucket.format)], context, options_);
  // Simulated ranks that share a model (copy) share its gradients: of the local ranks writing
  // one destination only the last copy survives, so only that one is made (256 copies of the
  // whole gradient per step become one per model copy at 256 x 1). The result is local rank
  // 0's buffer (ReducerOptions::resultInFirstOnly; every rank's sum is the same).
  for (size_t i = 0; i < data.size(); ++i) {
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const auto p = static_cast<size_t>(bucket.params[k]);
      const BufferView& grad = grads_[i][p];
      const float* src = data[0] + bucket.offsets[k];
      if (grad.data == src || grad.count == 0 || overwritten_[i][p]) continue;
      if (device_.isCuda()) {
        cuda::copyAsync(grad.data, src, grad.bytes(), cuda::CopyKind::DeviceToDevice, cuda::currentStream());
      } else {
        std::memcpy(grad.data, src, grad.bytes());
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stepStats_.commSeconds += secondsSince(start);
  stepStats_.nonFinite = stepStats_.nonFinite || sync.nonFinite;
  if (stepStats_.bytesSent.empty()) stepStats_.bytesSent.assign(sync.bytesSent.size(), 0);
  for (size_t i = 0; i < sync.bytesSent.size(); ++i) stepStats_.bytesSent[i] += sync.bytesSent[i];
}

}  // namespace aps::comm
