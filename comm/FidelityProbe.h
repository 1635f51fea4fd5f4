#pragma once

#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketHooks.h"
#include "comm/ExchangeSchedule.h"
#include "precision/QuantizationStats.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace aps::comm {

// One layer's figures on one probe step.
struct ProbeLayer {
  bool probed = false;
  double relError = 0.0;  // ||lp - fp32||_2 / ||fp32||_2 (0 when both are 0, inf when only fp32 is)
  double cosine = 1.0;    // <lp, fp32> / (||lp|| ||fp32||) (1 when both are 0, 0 when one is)
  // Integer counts (total, nonzero, flushed, saturated), summed over every rank: `in` every
  // rank's scaled contribution as encoded for sending, `out` every re-encode of a sum (the
  // two_shot owner's, each ring hop's; none for allgather).
  precision::QuantizationCounts in, out;
};

// The figures of one probed step, per parameter (ProbeLayer::probed false for a parameter
// whose bucket was not reduced through the probe).
struct ProbeRecord {
  uint64_t step = 0;
  std::vector<ProbeLayer> layers;
};

// The fidelity probe (docs/ALGORITHMS.md, Fidelity probe): on every step with step % K == 0,
// every bucket's raw gradients (as they enter the reduction, before any other hook) are also
// summed exactly in fp32 in rank order (the `native` schedule, through the bucket's
// transport: the same bits under sim and mpirun), and compared, per layer, with the
// low-precision sum the trainer uses once every scaling hook has been undone. Meanwhile it
// observes the all-reduce's encodes (EncodeObserver) and counts flushed and saturated values
// of the inputs and of the re-encoded sums, summed over every rank. First in the bucket hook
// chain, so its afterReduce runs last. Other steps cost one comparison per bucket.
class FidelityProbe : public BucketHook, public EncodeObserver {
 public:
  FidelityProbe(size_t params, int64_t interval);

  static bool due(uint64_t step, int64_t interval) {
    return interval > 0 && step % static_cast<uint64_t>(interval) == 0;
  }

  // The saturation threshold of each wire-format id (the format's largest finite value;
  // infinity for formats whose maximum is not fixed: only non-finite values count).
  void setMaxValues(std::vector<float> perFormat);

  void beforeReduce(const BucketContext& bucket, ParamScales& scales) override;
  void afterReduce(const BucketContext& bucket, ParamScales& scales) override;
  // On a GPU's buffers: the exact sum over the bucket's transport in device memory, the counts
  // and the comparison made there, only their figures read back.
  bool runsOnDevice() const override { return true; }
  bool readsDeviceMemory() const override { return device_.isCuda(); }
  // The observer of this bucket's all-reduce: this probe on its steps, else null.
  EncodeObserver* observerFor(const BucketContext& bucket);
  // Under a hierarchical reduction, the observer of the leader level (on probe steps): what
  // the leaders encode are the groups' sums, so their inputs count as re-encoded sums too.
  EncodeObserver* leaderObserverFor(const BucketContext& bucket);
  void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) override;

  // The last probed step's figures (once: it clears them); empty when no step was probed
  // since the last call.
  std::optional<ProbeRecord> take();

 private:
  class LeaderLevel : public EncodeObserver {
   public:
    explicit LeaderLevel(FidelityProbe& probe) : probe_(probe) {}
    bool readsDeviceMemory() const override { return probe_.readsDeviceMemory(); }
    void encoded(Site, int64_t begin, int64_t n, const float* values, const float* decoded) override {
      probe_.encoded(Site::Sum, begin, n, values, decoded);
    }

   private:
    FidelityProbe& probe_;
  };

  int64_t interval_;
  LeaderLevel leaderLevel_{*this};
  std::vector<float> maxValues_;
  std::unique_ptr<AllReduceAlgorithm> shadowAlgorithm_;  // native: fp32 in rank order
  std::unique_ptr<AllReduceAlgorithm> deviceShadow_;     // the same over device buffers (deviceShadowOn_)
  Device deviceShadowOn_ = Device::cpu();
  // The bucket being probed (communication thread only).
  bool active_ = false;
  const BucketLayout::Bucket* bucket_ = nullptr;
  Device device_ = Device::cpu();  // where the bucket lies
  float maxValue_ = 0.0f;
  std::vector<float> shadow_;                            // the exact fp32 sum of the bucket
  std::unique_ptr<cuda::DeviceScratch> deviceSum_;       // the same on a GPU
  std::vector<precision::QuantizationCounts> in_, out_;  // per layer of the bucket, this process's ranks
  std::mutex mutex_;
  std::optional<ProbeRecord> record_;
  size_t params_;
};

}  // namespace aps::comm
