#pragma once

// Model parallelism in Dettmers' and Megatron's sense (docs/ALGORITHMS.md, Model parallelism):
// named linear layers split by output features across the M ranks of a model-parallel group,
// their activations gathered and their errors (input gradients) reduced through the group's
// Transport in any aps wire format.
#include "comm/Transport.h"
#include "framework/nn/Module.h"
#include "framework/tensor/NamedTensor.h"
#include "precision/Codec.h"
#include "precision/CodecSpec.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace aps::train {

// The ranks that share the split layers: M ranks of which this process computes the slices
// `owned` (one under mpi; all M on the simulator, where one forward computes the whole group,
// whose ranks see the same batch). Moves each split layer's messages: every rank encodes its
// slice's values in the activation format, the messages are all-gathered through the group's
// transport, and every rank decodes all of them, its own included, so the ranks of a group hold
// the same bits after each exchange.
class ModelParallelGroup {
 public:
  struct Options {
    int size = 1;                          // M
    std::vector<int> owned;                // the slices this process computes, ascending
    comm::Transport* transport = nullptr;  // the group's M ranks
    precision::CodecSpec format;           // parallel.activation_format
    bool scaling = true;                   // parallel.activation_scaling: aps (float formats only)
    uint64_t seed = 0;                     // stochastic rounding
  };
  enum class Direction : uint8_t { Activations, Errors };

  explicit ModelParallelGroup(Options options);

  int size() const { return options_.size; }
  const Options& options() const { return options_; }
  const std::vector<int>& owned() const { return options_.owned; }
  const precision::Codec& codec() const { return *codec_; }
  // Registers a split layer by name; its index keys the random streams and the statistics.
  int addLayer(const std::string& name);
  const std::vector<std::string>& layers() const { return layerNames_; }

  // Where the next forward and backward belong: the step (micro-batch) and the data-parallel
  // rank, which key stochastic rounding; statistics and bytes are counted while `counting`
  // (training, not evaluation) for data-parallel rank 0, the rank whose figures are logged.
  void setPosition(uint64_t step, int dataRank, bool counting);

  // in[k]: n values of slice owned()[k]. Returns the decoded values of every slice 0 .. M - 1.
  std::vector<std::vector<float>> exchange(int layer, Direction direction, const std::vector<const float*>& in,
                                           int64_t n);

  // Bytes model-parallel rank 0 of data-parallel group 0 sent since the last call.
  uint64_t takeBytesSent();
  // Per split layer: the mean relative error (||decode(encode(x)) - x|| / ||x||) of its
  // activations and errors over the steps counted.
  nlohmann::json layerRecords() const;

 private:
  size_t messageBytes(int64_t n) const;
  void encode(const float* in, int64_t n, uint8_t* out, uint64_t stream) const;
  void decode(const uint8_t* in, int64_t n, float* out) const;

  Options options_;
  std::unique_ptr<precision::Codec> codec_;
  bool scaled_ = false;  // a float format below fp32 with scaling: aps
  float formatMax_ = 0;
  std::vector<std::string> layerNames_;
  uint64_t step_ = 0;
  int dataRank_ = 0;
  bool counting_ = false;
  uint64_t bytesSent_ = 0;
  // Per layer and direction: summed relative errors and their count.
  std::vector<double> relError_[2];
  std::vector<int64_t> relCount_[2];
};

// A linear layer whose weight (out, in) and bias are split by rows over a model-parallel group
// of M ranks: slice s holds output features [s out / M, (s + 1) out / M). Forward: each owned
// slice's y_s = x W_s^T + b_s, then the all-gather of the y_s gives every rank y. Backward:
// each owned slice's weight and bias gradients from its columns of dy, its partial input
// gradient dy_s W_s, and the all-gather of the partials, summed in slice order 0 .. M - 1,
// gives every rank dx. Parameters "weight_mp<s>" and "bias_mp<s>" for each owned slice.
class ColumnParallelLinear : public nn::Module {
 public:
  // From a whole layer's weight and bias (their slices are copied).
  ColumnParallelLinear(const Tensor& weight, const Tensor& bias, std::shared_ptr<ModelParallelGroup> group,
                       int layer);
  Tensor forward(const Tensor& input) override;

 private:
  std::shared_ptr<ModelParallelGroup> group_;
  int layer_ = 0;
  int64_t in_ = 0, out_ = 0, sliceOut_ = 0;
  std::vector<Tensor> weights_, biases_;  // per owned slice
};

// Replaces every nn::Linear of `model` whose dotted name matches one of `patterns` (globs) by a
// ColumnParallelLinear over `group`. Throws naming the pattern that matches no linear layer or
// the layer whose output features M does not divide. Returns the split layers' names.
std::vector<std::string> splitLinearLayers(nn::Module& model, const std::vector<std::string>& patterns,
                                           const std::shared_ptr<ModelParallelGroup>& group);

// Slice s of tensor "X" is named "X_mp<s>" (parameters and what is keyed by them: optimizer
// state). The name of the whole and the slice index of `name`, or -1 for a whole tensor.
int sliceOf(const std::string& name, std::string* whole = nullptr);

// The whole tensors from their slices: every "X_mp<s>" entry of `state` gathered over the
// group (a collective under mpi: every rank of the group calls it alike) and joined along dim 0
// in slice order as "X"; other entries unchanged, in order. On the simulator every slice is here.
NamedTensors joinSlices(const NamedTensors& state, ModelParallelGroup& group);

// The inverse for loading: each entry "X" (or "<kind>.X", optimizer state) for which `sliced`
// (the model state this process holds) has slices "X_mp<s>" becomes the owned slices
// "X_mp<s>" ("<kind>.X_mp<s>"), rows of dim 0.
NamedTensors splitToSlices(const NamedTensors& whole, const NamedTensors& sliced, const ModelParallelGroup& group);

}  // namespace aps::train
