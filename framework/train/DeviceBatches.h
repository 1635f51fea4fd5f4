#pragma once

#include "data/Batch.h"
#include "framework/tensor/Tensor.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <array>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace aps::train {

// The loader's batches on a GPU (device: cuda). Each local rank's images and labels are copied
// into page-locked host buffers and from there to the device on a copy stream of their own,
// which runs beside the compute stream (the legacy default stream): the copy of the next
// step's batches overlaps this step's compute, and compute waits only for its batch's event.
// Two slots per local rank alternate; a slot is filled again only once the compute that read
// it has passed (an event on the compute stream) and its previous copy is done (the host
// writes its pinned buffer), so no synchronisation is missing and none is global.
//
//   stage(step k's batches); stage(step k + 1's); take(rank) ... release(); stage(k + 2) ...
class DeviceBatches {
 public:
  DeviceBatches(Device device, int localRanks);
  ~DeviceBatches();
  DeviceBatches(const DeviceBatches&) = delete;
  DeviceBatches& operator=(const DeviceBatches&) = delete;

  // Queues the copies of one step's batches (one per local rank). At most two steps are staged
  // and not yet released.
  void stage(const std::vector<data::Batch>& batches);
  bool staged() const { return !pending_.empty(); }
  cuda::StreamHandle copyStream() const { return copyStream_.handle(); }
  // The oldest staged step's batch of local rank `local` on the device: (images, labels). Work
  // queued on the compute stream after this call sees the copied values.
  std::pair<Tensor, Tensor> take(int local);
  // The oldest staged step's compute is queued: its slots are free once the compute stream
  // passes this point.
  void release();
  // Drops the staged steps nobody will take (a loop that stopped early).
  void discardStaged() {
    while (staged()) release();
  }

 private:
  struct Slot {
    cuda::PinnedBuffer images, labels;
    Tensor deviceImages, deviceLabels;
    cuda::Event copied, consumed;
    bool used = false;  // copied and consumed have been recorded
  };
  void fill(Slot& slot, const data::Batch& batch);

  Device device_;
  cuda::Stream copyStream_;
  std::array<std::vector<std::unique_ptr<Slot>>, 2> slots_;
  int nextSlot_ = 0;
  std::deque<int> pending_;  // staged steps' slot indices, oldest first
};

}  // namespace aps::train
