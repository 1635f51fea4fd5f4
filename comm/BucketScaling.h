#pragma once

#include "comm/BucketHooks.h"
#include "comm/FidelityProbe.h"
#include "comm/GradientReducer.h"
#include "framework/numerics/RoundingMode.h"
#include "precision/ApsScaler.h"
#include "precision/CodecSpec.h"
#include "precision/FloatFormat.h"
#include "precision/Fp8LmScaler.h"
#include "precision/HybridPolicy.h"
#include "precision/QuantizationStats.h"
#include "precision/Quantizer.h"

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace aps::comm {

// The chain of bucket hooks around every bucket's all-reduce (comm/BucketHooks.h), in this
// order before the reduction (and the reverse after it):
//   1. ErrorFeedbackCompensate: last step's residual joins the gradient;
//   2. ApsHook: APS (or global) power-of-two shift per layer, agreed by a MAX over all ranks
//      (Han, Demmel, You; docs/ALGORITHMS.md, APS); undone exactly after the reduction;
//   3. Fp8LmHook: FP8-LM's shared mu (docs/ALGORITHMS.md, FP8-LM automatic scaling), updated
//      in finishStep() from every rank's saturation counts;
//   4. StatisticsHook: what quantizing local rank 0's scaled gradient does (flushed,
//      saturated, relative error) over a window of steps;
//   5. ErrorFeedbackCapture: each local rank's new residual, in gradient units.
// With a probe interval, the fidelity probe (FidelityProbe) comes before all of them: it sees
// the raw gradients and, after the reduction, the sum with every scaling undone.
// Each hook keeps its own state; a new mechanism is one more BucketHook in the chain. The
// per-format settings (FormatScaling) say which hooks act on buckets of each wire format.
// The reducer calls the chain as its ReductionHook (install).
class BucketScaling : public ReductionHook, public Stateful {
 public:
  struct FormatScaling {
    std::shared_ptr<const precision::ApsScaler> scaler;  // null: no APS scaling for this format
    std::shared_ptr<precision::Fp8LmScaler> autoscaler;  // set: FP8-LM automatic scaling instead
    std::optional<precision::FloatFormat> format;        // set: measure quantisation statistics
    precision::RoundingMode rounding = precision::RoundingMode::NearestEven;
    bool errorFeedback = false;  // needs `format`
    // false: no quantisation statistics for this format (the format still bounds what the
    // fidelity probe counts as saturated).
    bool statistics = true;

    // The hooks for buckets of one wire format: none for fp32 and for codecs that carry their
    // own scales (block-scaled, Dettmers'); otherwise statistics, error feedback when asked, and
    // APS (or global) or FP8-LM scaling per `mode` (with a new Fp8LmScaler; `perTensor`: its
    // per-tensor amax scale and 1/sqrt(N) pre-scale, as published, or mu alone).
    static FormatScaling forSpec(const precision::CodecSpec& spec, precision::ScalingMode mode, int worldSize,
                                 bool errorFeedback, bool perTensor = true);
  };

  // perFormat[f]: what to do for buckets of wire-format id f; paramCount: parameters in all;
  // localRanks: ranks of this process (simulated ranks each keep their own residuals);
  // probeInterval K > 0: the fidelity probe (FidelityProbe) runs first in the chain on every
  // step with step % K == 0.
  BucketScaling(std::vector<FormatScaling> perFormat, size_t paramCount, int statsWindow, int localRanks = 1,
                int64_t probeInterval = 0);

  // Replaces the per-format settings (hybrid precision widened a layer and the reducer was
  // rebuilt with new format ids); statistics, residuals and scaler states stay.
  void setFormats(std::vector<FormatScaling> perFormat);

  // After the step's buckets are reduced (the communication thread idle): the autoscalers
  // agree on the step's saturation counts over all ranks and update mu, identically everywhere.
  void finishStep(Transport& transport);

  // The chain, as the reducer's hook: beforeReduce in chain order, afterReduce in reverse.
  void beforeReduce(const BucketContext& bucket) override;
  void afterReduce(const BucketContext& bucket) override;
  // The all-reduce's encode observers for this bucket (the probe, the statistics), as one.
  EncodeObserver* encodeObserver(const BucketContext& bucket) override;
  // fp32 (no wire format to scale, measure or feed back) is left alone, unless a probe runs.
  bool readsInputs(int format) const override;
  // APS without error feedback or FP8-LM, and no probe (which reads every rank's values).
  bool readsFirstRankOnly(int format) const override;
  // Installs the chain as the reducer's hook (ReducerOptions::hook); the scaling must outlive
  // the reducer.
  void install(ReducerOptions& options) { options.hook = this; }
  // Installs the chain as the leader level of a hierarchical reduction
  // (ReducerOptions::leaderHook): a second BucketScaling whose scalers take their headroom for
  // the N/G leaders.
  void installLeaderLevel(ReducerOptions& options) { options.leaderHook = this; }
  // Under a hierarchical reduction, on the group level's scaling (after install): the
  // fidelity probe moves out of the chain to the world level (ReducerOptions::worldHook: the
  // exact sum over every rank, compared once the result reached every rank) and observes both
  // levels' encodes, the leaders' through `leaders`.
  void installWorldLevel(ReducerOptions& options, BucketScaling& leaders);

  // The shift parameter p got in the last step (0 when unscaled).
  int lastShift(int param) const;
  // Quantisation statistics of parameter p over the window.
  precision::QuantizationCounts statistics(int param) const;
  // What re-encoding the reduced sums did to parameter p over the window, summed over all
  // ranks (the two_shot owner's encode, every ring hop's; not read by hybrid precision).
  precision::QuantizationCounts outputStatistics(int param) const;
  // Applies hybrid precision's automatic rule to the statistics (HybridPolicy::adapt).
  std::vector<size_t> adapt(precision::HybridPolicy& policy);
  // Restarts parameter p's statistics window.
  void resetStatistics(int param);

  // The fidelity probe's figures of the last probed step (once); empty without a probe or
  // when no step was probed since the last call.
  std::optional<ProbeRecord> takeProbe();

  // The chain's state: every hook's entries (each hook names its own: StatisticsHook's
  // windows, ErrorFeedbackCapture's residuals of this process's local ranks). Loading gives
  // every hook the whole state.
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;
  // Local rank i's error-feedback residual of parameter p (empty until the first step that
  // used it; copied back where it lives on a GPU).
  std::vector<float> residual(int localRank, int param) const;

 private:
  // The all-reduce's encode observers for one bucket (the probe, the statistics), as one.
  // On a GPU's buffers it takes device pointers, and hands host copies to the targets that
  // want them.
  class Observers : public EncodeObserver {
   public:
    std::vector<EncodeObserver*> targets;
    bool onDevice = false;
    bool observes(Site site) const override;
    bool readsDeviceMemory() const override { return onDevice; }
    void encoded(Site site, int64_t begin, int64_t n, const float* values, const float* decoded) override;

   private:
    std::vector<float> hostValues_, hostDecoded_;
  };
  // The probe alone, around the whole of a hierarchical reduction (installWorldLevel).
  class WorldProbe : public ReductionHook {
   public:
    explicit WorldProbe(BucketScaling& owner) : owner_(owner) {}
    void beforeReduce(const BucketContext& bucket) override { owner_.runHook(*owner_.probe_, bucket, true); }
    void afterReduce(const BucketContext& bucket) override { owner_.runHook(*owner_.probe_, bucket, false); }

   private:
    BucketScaling& owner_;
  };

  // hook's beforeReduce (before) or afterReduce on `context`; on a GPU's buffers, on a host copy
  // where the hook uses them and does not run on the device (BucketHook::runsOnDevice), with
  // its changes written back.
  void runHook(BucketHook& hook, const BucketContext& context, bool before);

  int localRanks_;
  ParamScales scales_;
  std::shared_ptr<ErrorFeedbackState> feedback_;
  std::shared_ptr<StatisticsHook> statistics_;
  std::shared_ptr<FidelityProbe> probe_;            // null: no probe
  bool probeAtWorldLevel_ = false;                  // installWorldLevel: not in chain_
  std::shared_ptr<FidelityProbe> leaderProbe_;      // the group level's, on the leader level
  std::vector<std::shared_ptr<BucketHook>> chain_;  // in beforeReduce order
  std::vector<uint8_t> touchesFormat_;              // [format]: some hook acts on its buckets
  // [format]: APS (or global) scaling without error feedback or FP8-LM: the hooks read local
  // rank 0's values and the measured maxima only (ReducerOptions::sticky16Inputs).
  std::vector<uint8_t> readsFirstRankOnly_;
  Observers observers_;  // the current bucket's (communication thread)
  WorldProbe worldProbe_{*this};
};

}  // namespace aps::comm
