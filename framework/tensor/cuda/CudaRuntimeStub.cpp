// Built instead of CudaRuntime.cu when the CUDA backend is off: no device exists, and
// everything that would need one says so.
#include "framework/core/Error.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::cuda {

namespace {
[[noreturn]] void noCuda() {
  APS_FAIL("this build of aps has no CUDA backend (APS_WITH_CUDA=OFF or the CUDA toolkit was not found)");
}
}  // namespace

bool compiledWithCuda() { return false; }
int deviceCount() { return 0; }
std::string deviceDescription(int) { noCuda(); }
int computeCapability(int) { noCuda(); }
void setDevice(int) { noCuda(); }
int currentDevice() { noCuda(); }
void synchronize(int) { noCuda(); }
void* rawMalloc(size_t, int) { noCuda(); }
void rawFree(void*, int) { noCuda(); }
void memoryInfo(int, size_t*, size_t*) { noCuda(); }
void copyAsync(void*, const void*, size_t, CopyKind, StreamHandle) { noCuda(); }
void copySync(void*, const void*, size_t, CopyKind, StreamHandle) { noCuda(); }
void synchronizeStream(StreamHandle) { noCuda(); }
void zeroAsync(void*, size_t, StreamHandle) { noCuda(); }
void fillFloatAsync(float*, int64_t, float, StreamHandle) { noCuda(); }
void addFloatsAsync(float*, const float*, const float*, int64_t, StreamHandle) { noCuda(); }
void stridedCopyAsync(void*, const StridedLayout&, const void*, const StridedLayout&, int64_t, size_t, StreamHandle) {
  noCuda();
}
void fillOnDevice(float*, int64_t, float, int) { noCuda(); }

Stream::Stream(int) { noCuda(); }
Stream::~Stream() = default;
void Stream::synchronize() const { noCuda(); }
Event::Event(bool) { noCuda(); }
Event::~Event() = default;
void Event::record(StreamHandle) { noCuda(); }
void Event::wait(StreamHandle) const { noCuda(); }
void Event::synchronize() const { noCuda(); }
bool Event::done() const { noCuda(); }
float Event::millisecondsSince(const Event&) const { noCuda(); }
PinnedBuffer::PinnedBuffer(size_t) { noCuda(); }
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept = default;

}  // namespace aps::cuda
