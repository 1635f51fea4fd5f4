// The CUDA runtime of framework/tensor/cuda/CudaRuntime.h served by the host (the emulated
// device, APS_CUDA_EMULATION=ON): built instead of CudaRuntime.cu, so every caller of the
// runtime, the caching allocator included, runs as in a GPU build.
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/tensor/cuda/emu/EmuDevice.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

// What a StreamHandle points to in this build: the stream's queue and thread.
struct CUstream_st {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0, finished = 0;
  std::exception_ptr error;  // the first exception a work item threw, until a synchronisation reports it
  bool stopping = false;
  std::thread worker;

  CUstream_st() : worker([this] { run(); }) {}
  ~CUstream_st() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
  }

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      std::exception_ptr thrown;
      try {
        work();
      } catch (...) {
        thrown = std::current_exception();
      }
      lock.lock();
      if (thrown && !error) error = thrown;
      ++finished;
      changed.notify_all();
    }
  }

  void push(std::function<void()> work) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(work));
      ++queued;
    }
    changed.notify_all();
  }

  // Waits for everything queued so far; rethrows (once) what a work item threw.
  void drain() {
    std::unique_lock lock(mutex);
    const uint64_t target = queued;
    changed.wait(lock, [&] { return finished >= target; });
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
  }
};

namespace aps::cuda {

namespace {

// How many devices the emulation shows: APS_CUDA_EMU_DEVICES (1 to 16), else 1. Each rank of
// an mpirun on one machine needs a device of its own (comm/DeviceMapping.h), as on a GPU node;
// the devices share the process's emulated memory.
int deviceTotal() {
  static const int devices = [] {
    const char* text = std::getenv("APS_CUDA_EMU_DEVICES");
    if (text == nullptr || *text == '\0') return 1;
    const int n = std::atoi(text);
    APS_CHECK(n >= 1 && n <= 16, "APS_CUDA_EMU_DEVICES = '{}': the emulation shows 1 to 16 devices", text);
    return n;
  }();
  return devices;
}

// The emulated device's memory size: APS_CUDA_EMU_MEMORY_MIB, else 8 GiB (allocations past it
// return nullptr, as cudaMalloc's out-of-memory does, so the allocator's retry path runs).
size_t capacityBytes() {
  static const size_t bytes = [] {
    const char* mib = std::getenv("APS_CUDA_EMU_MEMORY_MIB");
    return (mib != nullptr && std::atoll(mib) > 0 ? static_cast<size_t>(std::atoll(mib)) : size_t{8192}) << 20;
  }();
  return bytes;
}

struct Mapping {
  size_t bytes = 0;
  size_t mapped = 0;  // bytes rounded up to pages
  char* alias = nullptr;
};

// Live device allocations keyed by their device address, and the pinned host buffers.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Mapping> device;
  std::map<uintptr_t, size_t> pinned;
  size_t used = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: streams may outlive static destruction order
  return *r;
}

CUstream_st& legacyStream() {
  static CUstream_st* s = new CUstream_st;
  return *s;
}

CUstream_st& streamOf(StreamHandle handle) { return handle != nullptr ? *handle : legacyStream(); }

int& threadDevice() {
  thread_local int device = 0;
  return device;
}

void checkIndex(int index) {
  APS_CHECK(index >= 0 && index < deviceTotal(),
            "emulated CUDA: cuda:{} does not exist (the emulation has {} device{})", index, deviceTotal(),
            deviceTotal() == 1 ? "" : "s");
}

std::vector<CUstream_st*>& liveStreams() {
  static auto* streams = new std::vector<CUstream_st*>;
  return *streams;
}
std::mutex& liveStreamsMutex() {
  static auto* m = new std::mutex;
  return *m;
}

void validateCopy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  // A device side that is not device memory is an error here (CUDA would take any address under
  // unified addressing and fail later, or not at all).
  if (kind != CopyKind::HostToDevice) emu::hostView(src, bytes);
  if (kind != CopyKind::DeviceToHost) emu::hostView(dst, bytes);
}

std::atomic<uint64_t> hostDeviceBytes{0};  // emu::hostDeviceBytesCopied

}  // namespace

namespace emu {

uint64_t hostDeviceBytesCopied() { return hostDeviceBytes.load(std::memory_order_relaxed); }

void* hostView(const void* device, size_t bytes) {
  if (device == nullptr) return nullptr;
  const auto address = reinterpret_cast<uintptr_t>(device);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.device.upper_bound(address);
  APS_CHECK(it != r.device.begin(),
            "emulated CUDA: {} is not device memory (a host pointer where a device pointer "
            "belongs)",
            device);
  --it;
  const size_t offset = address - it->first;
  APS_CHECK(offset + bytes <= it->second.bytes,
            "emulated CUDA: {} bytes at {} are outside the device allocation of {} bytes at {:#x}", bytes, device,
            it->second.bytes, it->first);
  return it->second.alias + offset;
}

void enqueue(StreamHandle stream, std::function<void()> work) { streamOf(stream).push(std::move(work)); }

bool isPinned(const void* data, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.pinned.upper_bound(address);
  if (it == r.pinned.begin()) return false;
  --it;
  return address - it->first + bytes <= it->second;
}

}  // namespace emu

bool compiledWithCuda() { return true; }
int deviceCount() { return deviceTotal(); }

std::string deviceDescription(int index) {
  checkIndex(index);
  return "aps emulated CUDA device (host threads), " + std::to_string(capacityBytes() >> 30) + " GiB";
}

int computeCapability(int index) {
  checkIndex(index);
  return 0;
}

void setDevice(int index) {
  checkIndex(index);
  threadDevice() = index;
}
int currentDevice() { return threadDevice(); }

void synchronize(int index) {
  checkIndex(index);
  legacyStream().drain();
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard lock(liveStreamsMutex());
    streams = liveStreams();
  }
  for (CUstream_st* s : streams) s->drain();
}

void* rawMalloc(size_t bytes, int index) {
  checkIndex(index);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = std::max<size_t>(page, (bytes + page - 1) / page * page);
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.used + mapped > capacityBytes()) return nullptr;
    r.used += mapped;
  }
  auto giveBack = [&] {
    std::lock_guard lock(r.mutex);
    r.used -= mapped;
  };
  const int fd = ::memfd_create("aps-emulated-device", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    if (fd >= 0) ::close(fd);
    giveBack();
    APS_FAIL("emulated CUDA: cannot create {} bytes of device memory: {}", bytes, std::strerror(errno));
  }
  // The device address: the same pages with no access at all.
  void* device = ::mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  void* alias = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (device == MAP_FAILED || alias == MAP_FAILED) {
    if (device != MAP_FAILED) ::munmap(device, mapped);
    if (alias != MAP_FAILED) ::munmap(alias, mapped);
    giveBack();
    return nullptr;
  }
  std::lock_guard lock(r.mutex);
  r.device[reinterpret_cast<uintptr_t>(device)] = Mapping{bytes, mapped, static_cast<char*>(alias)};
  return device;
}

void rawFree(void* data, int index) {
  if (data == nullptr) return;
  checkIndex(index);
  // cudaFree waits for the device's work; so does this, before the pages go.
  synchronize(index);
  Registry& r = registry();
  Mapping m;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.device.find(reinterpret_cast<uintptr_t>(data));
    APS_CHECK(it != r.device.end(), "emulated CUDA: rawFree({}) is not the start of a device allocation", data);
    m = it->second;
    r.device.erase(it);
    r.used -= m.mapped;
  }
  ::munmap(data, m.mapped);
  ::munmap(m.alias, m.mapped);
}

void memoryInfo(int index, size_t* freeBytes, size_t* totalBytes) {
  checkIndex(index);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  *totalBytes = capacityBytes();
  *freeBytes = capacityBytes() - r.used;
}

// cudaMemcpyAsync's host-memory rules: from pageable memory the call returns once the bytes
// are staged (the caller may reuse its buffer); to pageable memory it returns when the copy
// is done; pinned memory on either side makes the copy asynchronous, so the host must not touch
// that buffer until it synchronises.
void copyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) {
  if (bytes == 0) return;
  validateCopy(dst, src, bytes, kind);
  if (kind != CopyKind::DeviceToDevice) hostDeviceBytes.fetch_add(bytes, std::memory_order_relaxed);
  auto copy = [dst, src, bytes, kind] {
    void* to = kind == CopyKind::DeviceToHost ? dst : emu::hostView(dst, bytes);
    const void* from = kind == CopyKind::HostToDevice ? src : emu::hostView(src, bytes);
    std::memcpy(to, from, bytes);
  };
  switch (kind) {
    case CopyKind::HostToDevice:
      if (emu::isPinned(src, bytes)) {
        emu::enqueue(stream, copy);
      } else {
        auto staged =
            std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
        emu::enqueue(stream, [dst, bytes, staged] { std::memcpy(emu::hostView(dst, bytes), staged->data(), bytes); });
      }
      return;
    case CopyKind::DeviceToHost:
      emu::enqueue(stream, copy);
      if (!emu::isPinned(dst, bytes)) streamOf(stream).drain();
      return;
    case CopyKind::DeviceToDevice:
      emu::enqueue(stream, copy);
      return;
  }
}

void copySync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) {
  if (bytes == 0) return;
  copyAsync(dst, src, bytes, kind, stream);
  streamOf(stream).drain();
}

void synchronizeStream(StreamHandle stream) { streamOf(stream).drain(); }

void zeroAsync(void* data, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  emu::hostView(data, bytes);
  emu::enqueue(stream, [data, bytes] { std::memset(emu::hostView(data, bytes), 0, bytes); });
}

void fillFloatAsync(float* device, int64_t n, float value, StreamHandle stream) {
  if (n <= 0) return;
  emu::view(device, n);
  emu::enqueue(stream, [device, n, value] { std::fill_n(emu::view(device, n), n, value); });
}

void addFloatsAsync(float* out, const float* a, const float* b, int64_t n, StreamHandle stream) {
  if (n <= 0) return;
  emu::view(out, n), emu::view(a, n), emu::view(b, n);
  emu::enqueue(stream, [out, a, b, n] {
    float* o = emu::view(out, n);
    const float *x = emu::view(a, n), *y = emu::view(b, n);
    for (int64_t i = 0; i < n; ++i) o[i] = (x != nullptr ? x[i] : 0.0f) + y[i];
  });
}

namespace {
// The extent of a view in elements from its first element (its largest offset + 1).
int64_t extentOf(const StridedLayout& layout) {
  int64_t last = 0;
  for (int32_t d = 0; d < layout.dims; ++d) last += (layout.sizes[d] - 1) * layout.strides[d];
  return last + 1;
}
}  // namespace

void stridedCopyAsync(void* dst, const StridedLayout& dstLayout, const void* src, const StridedLayout& srcLayout,
                      int64_t n, size_t elementSize, StreamHandle stream) {
  if (n <= 0) return;
  const size_t dstBytes = static_cast<size_t>(extentOf(dstLayout)) * elementSize;
  const size_t srcBytes = static_cast<size_t>(extentOf(srcLayout)) * elementSize;
  emu::hostView(dst, dstBytes), emu::hostView(src, srcBytes);
  emu::enqueue(stream, [=] {
    auto* to = static_cast<char*>(emu::hostView(dst, dstBytes));
    const auto* from = static_cast<const char*>(emu::hostView(src, srcBytes));
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(to + stridedOffset(dstLayout, i) * static_cast<int64_t>(elementSize),
                  from + stridedOffset(srcLayout, i) * static_cast<int64_t>(elementSize), elementSize);
    }
  });
}

void fillOnDevice(float* host, int64_t n, float value, int index) {
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  void* device = rawMalloc(bytes, index);
  APS_CHECK(device != nullptr, "emulated CUDA: out of device memory for {} bytes", bytes);
  fillFloatAsync(static_cast<float*>(device), n, value, nullptr);
  copySync(host, device, bytes, CopyKind::DeviceToHost, nullptr);
  rawFree(device, index);
}

Stream::Stream(int device) : device_(device) {
  checkIndex(device);
  handle_ = new CUstream_st;
  std::lock_guard lock(liveStreamsMutex());
  liveStreams().push_back(handle_);
}

Stream::~Stream() {
  {
    std::lock_guard lock(liveStreamsMutex());
    auto& streams = liveStreams();
    streams.erase(std::remove(streams.begin(), streams.end(), handle_), streams.end());
  }
  delete handle_;  // runs what is queued, as cudaStreamDestroy lets pending work finish
}

void Stream::synchronize() const { handle_->drain(); }

namespace {

// An event: how many times it was recorded, how many of those records a stream has reached,
// and when the last one was reached.
struct EventState {
  std::mutex mutex;
  std::condition_variable reached;
  uint64_t recorded = 0, done = 0;
  std::chrono::steady_clock::time_point at{};
};

EventState& stateOf(void* handle) { return *static_cast<std::shared_ptr<EventState>*>(handle)->get(); }

}  // namespace

Event::Event(bool) { handle_ = new std::shared_ptr<EventState>(std::make_shared<EventState>()); }

Event::~Event() { delete static_cast<std::shared_ptr<EventState>*>(handle_); }

void Event::record(StreamHandle stream) {
  std::shared_ptr<EventState> state = *static_cast<std::shared_ptr<EventState>*>(handle_);
  uint64_t generation = 0;
  {
    std::lock_guard lock(state->mutex);
    generation = ++state->recorded;
  }
  emu::enqueue(stream, [state, generation] {
    {
      std::lock_guard lock(state->mutex);
      state->done = std::max(state->done, generation);
      state->at = std::chrono::steady_clock::now();
    }
    state->reached.notify_all();
  });
}

void Event::wait(StreamHandle stream) const {
  std::shared_ptr<EventState> state = *static_cast<std::shared_ptr<EventState>*>(handle_);
  uint64_t target = 0;
  {
    std::lock_guard lock(state->mutex);
    target = state->recorded;  // the record most recently queued, as cudaStreamWaitEvent takes
  }
  if (target == 0) return;
  emu::enqueue(stream, [state, target] {
    std::unique_lock lock(state->mutex);
    state->reached.wait(lock, [&] { return state->done >= target; });
  });
}

void Event::synchronize() const {
  EventState& state = stateOf(handle_);
  std::unique_lock lock(state.mutex);
  const uint64_t target = state.recorded;
  state.reached.wait(lock, [&] { return state.done >= target; });
}

bool Event::done() const {
  EventState& state = stateOf(handle_);
  std::lock_guard lock(state.mutex);
  return state.done >= state.recorded;
}

float Event::millisecondsSince(const Event& start) const {
  EventState& a = stateOf(start.handle_);
  EventState& b = stateOf(handle_);
  std::chrono::steady_clock::time_point from, to;
  {
    std::lock_guard lock(a.mutex);
    APS_CHECK(a.recorded > 0 && a.done >= a.recorded, "emulated CUDA: the start event has not completed");
    from = a.at;
  }
  {
    std::lock_guard lock(b.mutex);
    APS_CHECK(b.recorded > 0 && b.done >= b.recorded, "emulated CUDA: the end event has not completed");
    to = b.at;
  }
  return std::chrono::duration<float, std::milli>(to - from).count();
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  data_ = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  APS_CHECK(data_ != nullptr, "emulated CUDA: cannot allocate {} bytes of pinned memory", bytes);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.pinned[reinterpret_cast<uintptr_t>(data_)] = bytes;
}

namespace {
void freePinned(void* data) {
  if (data == nullptr) return;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.pinned.erase(reinterpret_cast<uintptr_t>(data));
  }
  std::free(data);
}
}  // namespace

PinnedBuffer::~PinnedBuffer() { freePinned(data_); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    freePinned(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace aps::cuda
