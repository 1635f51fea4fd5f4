#include "framework/train/DeviceBatches.h"

#include "framework/core/Error.h"

#include <cstring>
#include <span>

namespace aps::train {

namespace {
template <class T>
size_t bytesOf(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}
}  // namespace

DeviceBatches::DeviceBatches(Device device, int localRanks) : device_(device), copyStream_(device.index) {
  APS_CHECK(!device.isCpu(), "DeviceBatches: the device must be a GPU, got {}", deviceName(device));
  for (auto& ranks : slots_) {
    for (int i = 0; i < localRanks; ++i) ranks.push_back(std::make_unique<Slot>());
  }
}

DeviceBatches::~DeviceBatches() {
  // The pinned buffers and device tensors must outlive the copies and kernels queued on them.
  copyStream_.synchronize();
  for (auto& ranks : slots_) {
    for (auto& slot : ranks) {
      if (slot->used) slot->consumed.synchronize();
    }
  }
}

void DeviceBatches::fill(Slot& slot, const data::Batch& batch) {
  if (slot.used) {
    slot.copied.synchronize();                 // the host is about to write the pinned buffers
    slot.consumed.wait(copyStream_.handle());  // the device tensors: after the compute that read them
  }
  const size_t imageBytes = bytesOf(batch.images), labelBytes = bytesOf(batch.labels);
  if (slot.images.bytes() < imageBytes) slot.images = cuda::PinnedBuffer(imageBytes);
  if (slot.labels.bytes() < labelBytes) slot.labels = cuda::PinnedBuffer(labelBytes);
  const Shape imageShape(batch.imageShape.begin(), batch.imageShape.end());
  const Shape labelShape(batch.labelShape.begin(), batch.labelShape.end());
  if (!slot.deviceImages.defined() || slot.deviceImages.sizes() != imageShape ||
      slot.deviceLabels.sizes() != labelShape) {
    // New shapes (the epoch's last batch): the old tensors may be read by queued compute until
    // its event; the caching allocator would hand their memory to this stream at once.
    if (slot.used) slot.consumed.synchronize();
    slot.deviceImages = Tensor::empty(imageShape, DType::Float32, device_);
    slot.deviceLabels = Tensor::empty(labelShape, DType::Int64, device_);
    // Their blocks may come from tensors freed while kernels that use them are still queued on
    // the compute stream (the allocator reuses in that stream's order): this stream writes
    // them after that work.
    cuda::Event freed;
    freed.record(nullptr);
    freed.wait(copyStream_.handle());
  }
  std::memcpy(slot.images.data(), batch.images.data(), imageBytes);
  std::memcpy(slot.labels.data(), batch.labels.data(), labelBytes);
  cuda::copyAsync(slot.deviceImages.rawData(), slot.images.data(), imageBytes, cuda::CopyKind::HostToDevice,
                  copyStream_.handle());
  cuda::copyAsync(slot.deviceLabels.rawData(), slot.labels.data(), labelBytes, cuda::CopyKind::HostToDevice,
                  copyStream_.handle());
  slot.copied.record(copyStream_.handle());
}

void DeviceBatches::stage(const std::vector<data::Batch>& batches) {
  APS_CHECK(pending_.size() < slots_.size(), "DeviceBatches: {} steps are staged and none released", pending_.size());
  auto& ranks = slots_[static_cast<size_t>(nextSlot_)];
  APS_CHECK(batches.size() == ranks.size(), "DeviceBatches: {} batches staged for {} local ranks", batches.size(),
            ranks.size());
  for (size_t i = 0; i < batches.size(); ++i) fill(*ranks[i], batches[i]);
  pending_.push_back(nextSlot_);
  nextSlot_ ^= 1;
}

std::pair<Tensor, Tensor> DeviceBatches::take(int local) {
  APS_CHECK(!pending_.empty(), "DeviceBatches: take() with no step staged");
  Slot& slot = *slots_[static_cast<size_t>(pending_.front())].at(static_cast<size_t>(local));
  slot.copied.wait(nullptr);  // the compute stream: after the copy
  return {slot.deviceImages, slot.deviceLabels};
}

void DeviceBatches::release() {
  APS_CHECK(!pending_.empty(), "DeviceBatches: release() with no step staged");
  for (auto& slot : slots_[static_cast<size_t>(pending_.front())]) {
    slot->consumed.record(nullptr);
    slot->used = true;
  }
  pending_.pop_front();
}

}  // namespace aps::train
