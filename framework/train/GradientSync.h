#pragma once

#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"
#include "framework/train/Config.h"
#include "precision/CodecSpec.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aps::comm {
class Communicator;
class Transport;
}  // namespace aps::comm
namespace aps::precision {
class Fp8LmScaler;
class HybridPolicy;
}  // namespace aps::precision

namespace aps::train {

// Everything about gradient precision on the wire, for the ranks of this process: one
// CodecSpec per parameter (precision.format and the hybrid rules, resolved once), the bucket
// reducer and its scaling hooks (APS, FP8-LM autoscale, error feedback, statistics), hybrid
// precision's automatic widening, and the state of all of it for checkpoints.
//
// Per step: backward hands each gradient to the reducer through the gradient-ready hooks
// attach() installs; finishStep() waits for the reduced, averaged gradients; adaptFormats()
// applies hybrid precision's rule once the optimizer has stepped.
class GradientSync : public Stateful {
 public:
  // The ranks this process runs: all `world` ranks' collectives, gradients and small ones
  // alike, go through `transport`. Ranks firstRank .. firstRank + localRanks - 1 are this
  // process's. `gradients` (comm.backend: nccl, or sim on a GPU): the transport of the
  // gradients' all-reduce instead, over device memory; the parameters' gradients are then reduced where they lie, on
  // their GPU, and `transport` carries the small agreements in host memory.
  struct Ranks {
    comm::Transport* transport = nullptr;
    int world = 1, firstRank = 0, localRanks = 1;
    comm::Transport* gradients = nullptr;
  };
  using MetricsSink = std::function<void(const nlohmann::json&)>;

  // Resolves every parameter's wire format and builds the reducer. `params` are the model's
  // parameters, whose .grad() buffers the reducer reduces in place. `copies` (simulated ranks
  // computed side by side, comm.sim_workers): the parameters of further copies of the model;
  // with C copies in all (the model first), copy c computes local ranks c, c + C, c + 2C, ...
  GradientSync(const TrainConfig& config, NamedTensors params, Ranks ranks, MetricsSink metrics,
               std::vector<NamedTensors> copies = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Adds a leaf hook (ToReducer) to every parameter: it calls beforeReady(param, localRank,
  // grad) (fault injection; may be empty), then hands the gradient to the reducer. Without
  // beforeReady, simulated ranks other than 0 hand their gradients over as backward makes them
  // (autograd::LeafHook::takeFirst, GradientReducer::markReadyFrom), without writing .grad.
  using BeforeReady = std::function<void(int64_t param, int localRank, Tensor& grad)>;
  void attach(BeforeReady beforeReady);

  // The simulated rank whose backward runs next on model copy `copy` (0: the model; its
  // gradients are that rank's).
  void setLocalRank(int localRank, int copy = 0) { currentLocal_[static_cast<size_t>(copy)] = localRank; }

  // Gradient accumulation (optimizer.accumulation_steps): while model copy `copy`'s gradients
  // are held, its backward sums them into .grad and the reducer sees nothing; the backward
  // after holdGradients(false) hands the sums over (its hooks see .grad's final value).
  void holdGradients(bool hold, int copy = 0) { holding_[static_cast<size_t>(copy)] = hold ? 1 : 0; }

  // The step the stochastic rounding streams are at (a resumed run continues them).
  void setStep(uint64_t step);

  // Waits for every bucket of the step (the reduced, averaged gradients are then in place)
  // and lets the scaling hooks finish the step (FP8-LM's mu for the next one).
  comm::StepCommStats finishStep();

  // Hybrid precision's automatic rule on rank 0's statistics, applied by every rank alike;
  // `step` is the step the decision is logged at. Rebuilds the reducer when a layer widened.
  void adaptFormats(int64_t step);

  // Checkpoint state (the "precision" section): the bucket hooks' state (statistics windows;
  // every rank's error-feedback residuals as "residual.<rank>", gathered to rank 0: stateDict
  // is a collective under mpi), the widenings, and each FP8-LM scaler's state as
  // "autoscale.<codec>". loadStateDict rebuilds the reducer at the step last set (setStep)
  // when the state has widened layers; without "residual_sizes" the residuals start from zero
  // (a checkpoint of another world size, whose ranks were others: the trainer leaves them out).
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

  // For the metrics: each parameter's wire format ({"name", "format"}), each layer's last
  // shift and quantisation statistics, and FP8-LM's mu per wire format.
  nlohmann::json formatsRecord() const;
  nlohmann::json layerRecords() const;
  nlohmann::json autoscaleRecord() const;
  // The fidelity probe over the run so far (precision.probe_interval; null without it): probed
  // steps, and the median over layers of each layer's mean rel_error and cosine.
  nlohmann::json probeSummary() const;

 private:
  class ToReducer;
  // The parameters of model copy c (0: the model).
  NamedTensors& paramsOfCopy(size_t c) { return c == 0 ? params_ : copies_[c - 1]; }
  void resolveFormats();
  void buildReducer(uint64_t step);
  void groupParamsByFormat();
  void setScalingFormats(const std::vector<comm::BucketScaling::FormatScaling>& perFormat,
                         const std::vector<comm::BucketScaling::FormatScaling>* leaderFormat);
  comm::ReducerOptions reducerOptions() const;
  std::vector<std::vector<comm::NamedGradient>> localRankGradients();
  // The hooks of wire format `format` for a reduction over `ranks` ranks (the world, or one
  // level of comm.algorithm: hierarchical).
  comm::BucketScaling::FormatScaling scalingOf(size_t format, int ranks);
  void logFormats() const;
  void writeProbe(const comm::ProbeRecord& record);

  const TrainConfig& config_;
  NamedTensors params_;
  std::vector<NamedTensors> copies_;  // the parameters of the model's further copies
  Ranks ranks_;
  MetricsSink metrics_;
  std::vector<precision::CodecSpec> paramSpecs_;                                // per parameter
  std::vector<precision::CodecSpec> specs_;                                     // per wire-format id
  std::vector<std::string> codecNames_;                                         // per wire-format id
  std::vector<int> formatOf_;                                                   // per parameter
  std::unique_ptr<precision::HybridPolicy> policy_;                             // precision.hybrid_auto
  std::vector<int64_t> widenings_;                                              // per parameter
  std::map<std::string, std::shared_ptr<precision::Fp8LmScaler>> autoscalers_;  // per codec name
  std::shared_ptr<comm::BucketScaling> scaling_;
  std::shared_ptr<comm::BucketScaling> leaderScaling_;  // hierarchical: the leaders' level (headroom N/G)
  std::unique_ptr<comm::GradientReducer> reducer_;
  std::vector<int> currentLocal_;  // per model copy: the local rank its backward computes
  std::vector<char> holding_;      // per model copy: gradients held in .grad (holdGradients)
  uint64_t step_ = 0;              // setStep's: where a rebuild on loading continues
  // The fidelity probe's running sums per parameter: rel_error, cosine, probed steps.
  std::vector<double> probeRelError_, probeCosine_;
  std::vector<int64_t> probeCount_;
  int64_t probeSteps_ = 0;
  int64_t probeNonFiniteSteps_ = 0;  // probed steps where some layer's error was inf or NaN
};

}  // namespace aps::train
