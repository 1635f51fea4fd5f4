#include "framework/train/ModelParallel.h"

#include "comm/SmallAllReduce.h"
#include "framework/autograd/Function.h"
#include "framework/core/Error.h"
#include "framework/nn/Linear.h"
#include "framework/ops/Backend.h"
#include "precision/HybridPolicy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace aps::train {

namespace {

// A 64-bit mix of the fields that key a message's stochastic rounding (splitmix64's finaliser
// over each), so that no two (step, layer, direction, rank, slice) share a stream.
uint64_t streamOf(std::initializer_list<uint64_t> fields) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const uint64_t f : fields) {
    h ^= f + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

constexpr size_t kShiftHeader = sizeof(int32_t);

}  // namespace

ModelParallelGroup::ModelParallelGroup(Options options) : options_(std::move(options)) {
  APS_CHECK(options_.size >= 1 && options_.transport != nullptr && options_.transport->worldSize() == options_.size,
            "model parallelism: a group of {} ranks needs a transport of as many", options_.size);
  APS_CHECK(!options_.owned.empty(), "model parallelism: this process computes no slice of the group");
  for (const int s : options_.owned) {
    APS_CHECK(s >= 0 && s < options_.size && options_.transport->isLocal(s),
              "model parallelism: slice {} is not a local rank of the group", s);
  }
  codec_ = precision::makeCodec(options_.format);
  scaled_ = options_.scaling && options_.format.kind == precision::CodecSpec::Kind::Float && !codec_->encodesFp32Bits();
  if (scaled_) formatMax_ = options_.format.format.maxValue();
}

int ModelParallelGroup::addLayer(const std::string& name) {
  layerNames_.push_back(name);
  for (int d = 0; d < 2; ++d) {
    relError_[d].push_back(0.0);
    relCount_[d].push_back(0);
  }
  return static_cast<int>(layerNames_.size()) - 1;
}

void ModelParallelGroup::setPosition(uint64_t step, int dataRank, bool counting) {
  step_ = step;
  dataRank_ = dataRank;
  counting_ = counting;
}

size_t ModelParallelGroup::messageBytes(int64_t n) const { return (scaled_ ? kShiftHeader : 0) + codec_->encodedBytes(n); }

// With scaling: the power of two that puts the largest finite magnitude in the format's top
// binade without passing its largest value (APS's shift for one rank, no headroom: the
// messages are decoded before they are summed), in a 4-byte header; 0 for all-zero or
// non-finite messages, whose inf and NaN then travel as the format carries them.
void ModelParallelGroup::encode(const float* in, int64_t n, uint8_t* out, uint64_t stream) const {
  int32_t shift = 0;
  const precision::EncodeContext ctx{options_.seed, stream, 0};
  if (!scaled_) {
    codec_->encode(in, n, out, ctx);
    return;
  }
  float maxAbs = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(in[i]);
    finite = finite && std::isfinite(a);
    maxAbs = std::max(maxAbs, std::isfinite(a) ? a : 0.0f);
  }
  if (finite && maxAbs > 0) {
    shift = std::ilogb(formatMax_) - std::ilogb(maxAbs);
    if (std::ldexp(maxAbs, shift) > formatMax_) --shift;
    shift = std::clamp(shift, -126, 126);
  }
  std::memcpy(out, &shift, kShiftHeader);
  if (shift == 0) {
    codec_->encode(in, n, out + kShiftHeader, ctx);
    return;
  }
  std::vector<float> scaled(in, in + n);
  for (float& v : scaled) v = std::ldexp(v, shift);
  codec_->encode(scaled.data(), n, out + kShiftHeader, ctx);
}

void ModelParallelGroup::decode(const uint8_t* in, int64_t n, float* out) const {
  if (!scaled_) {
    codec_->decode(in, n, out);
    return;
  }
  int32_t shift = 0;
  std::memcpy(&shift, in, kShiftHeader);
  codec_->decode(in + kShiftHeader, n, out);
  if (shift != 0) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::ldexp(out[i], -shift);
  }
}

std::vector<std::vector<float>> ModelParallelGroup::exchange(int layer, Direction direction,
                                                             const std::vector<const float*>& in, int64_t n) {
  const int m = options_.size;
  APS_CHECK(in.size() == options_.owned.size(), "model parallelism: {} inputs for {} owned slices", in.size(),
            options_.owned.size());
  const size_t bytes = messageBytes(n);
  std::vector<std::vector<uint8_t>> mine(in.size(), std::vector<uint8_t>(bytes));
  std::vector<const void*> minePointers;
  const auto dir = static_cast<uint64_t>(direction);
  for (size_t k = 0; k < in.size(); ++k) {
    const int s = options_.owned[k];
    encode(in[k], n, mine[k].data(),
           streamOf({step_, static_cast<uint64_t>(layer), dir, static_cast<uint64_t>(dataRank_),
                     static_cast<uint64_t>(s)}));
    minePointers.push_back(mine[k].data());
  }
  // Every slice's message to every rank of the group; each decodes all of them, its own too.
  std::vector<uint8_t> all(bytes * static_cast<size_t>(m));
  comm::allGatherBytes(*options_.transport, minePointers, bytes, all.data());
  std::vector<std::vector<float>> out(static_cast<size_t>(m), std::vector<float>(static_cast<size_t>(n)));
  for (int s = 0; s < m; ++s) decode(all.data() + bytes * static_cast<size_t>(s), n, out[static_cast<size_t>(s)].data());
  if (counting_ && dataRank_ == 0) {
    bytesSent_ += static_cast<uint64_t>(m - 1) * bytes;  // model-parallel rank 0's message to the others
    // The relative error of slice 0's message (rank 0's), where this process holds it.
    if (options_.owned.front() == 0) {
      double err = 0, ref = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double x = in[0][i], e = static_cast<double>(out[0][static_cast<size_t>(i)]) - x;
        err += e * e;
        ref += x * x;
      }
      if (ref > 0 && std::isfinite(err)) {
        relError_[dir][static_cast<size_t>(layer)] += std::sqrt(err / ref);
        relCount_[dir][static_cast<size_t>(layer)] += 1;
      }
    }
  }
  return out;
}

uint64_t ModelParallelGroup::takeBytesSent() { return std::exchange(bytesSent_, 0); }

nlohmann::json ModelParallelGroup::layerRecords() const {
  nlohmann::json out = nlohmann::json::array();
  auto mean = [&](int d, size_t l) -> nlohmann::json {
    if (relCount_[d][l] == 0) return nullptr;
    return relError_[d][l] / static_cast<double>(relCount_[d][l]);
  };
  for (size_t l = 0; l < layerNames_.size(); ++l) {
    out.push_back({{"name", layerNames_[l]},
                   {"format", codec_->name()},
                   {"activation_rel_error", mean(0, l)},
                   {"error_rel_error", mean(1, l)}});
  }
  return out;
}

ColumnParallelLinear::ColumnParallelLinear(const Tensor& weight, const Tensor& bias,
                                           std::shared_ptr<ModelParallelGroup> group, int layer)
    : Module("ColumnParallelLinear"), group_(std::move(group)), layer_(layer) {
  APS_CHECK(weight.dim() == 2, "ColumnParallelLinear: weight of shape {}", weight.shapeString());
  out_ = weight.size(0);
  in_ = weight.size(1);
  const int m = group_->size();
  APS_CHECK(out_ % m == 0, "ColumnParallelLinear: {} output features do not split over {} ranks", out_, m);
  sliceOut_ = out_ / m;
  const Tensor w = weight.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  for (const int s : group_->owned()) {
    Tensor ws = Tensor::empty({sliceOut_, in_});
    ws.copyFrom(w.narrow(0, s * sliceOut_, sliceOut_).contiguous());
    weights_.push_back(registerParameter("weight_mp" + std::to_string(s), ws));
    if (b.defined()) {
      Tensor bs = Tensor::empty({sliceOut_});
      bs.copyFrom(b.narrow(0, s * sliceOut_, sliceOut_).contiguous());
      biases_.push_back(registerParameter("bias_mp" + std::to_string(s), bs));
    }
  }
}

Tensor ColumnParallelLinear::forward(const Tensor& input) {
  APS_CHECK(input.dim() == 2 && input.size(1) == in_, "ColumnParallelLinear: input shape {} for {} input features",
            input.shapeString(), in_);
  APS_CHECK(input.device().isCpu(), "ColumnParallelLinear: runs on the cpu only");
  const Tensor cx = input.contiguous().detach();
  const int64_t rows = cx.size(0);
  const int m = group_->size();
  const size_t owned = weights_.size();
  const bool hasBias = !biases_.empty();
  const ops::Backend& backend = ops::backendFor("linear", {&cx});
  std::vector<Tensor> slices;
  std::vector<const float*> sent;
  for (size_t k = 0; k < owned; ++k) {
    Tensor y = Tensor::empty({rows, sliceOut_});
    backend.linearForward(y.data<float>(), cx.data<float>(), weights_[k].data<float>(),
                          hasBias ? biases_[k].data<float>() : nullptr, rows, in_, sliceOut_);
    sent.push_back(y.data<float>());
    slices.push_back(std::move(y));
  }
  const auto parts = group_->exchange(layer_, ModelParallelGroup::Direction::Activations, sent, rows * sliceOut_);
  Tensor out = Tensor::empty({rows, out_});
  float* o = out.data<float>();
  for (int s = 0; s < m; ++s) {
    const float* part = parts[static_cast<size_t>(s)].data();
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(o + r * out_ + s * sliceOut_, part + r * sliceOut_, static_cast<size_t>(sliceOut_) * sizeof(float));
    }
  }
  std::vector<Tensor> inputs{input};
  for (const Tensor& w : weights_) inputs.push_back(w);
  for (const Tensor& b : biases_) inputs.push_back(b);
  std::vector<Tensor> ws;
  for (const Tensor& w : weights_) ws.push_back(w.detach());
  const bool gx = input.requiresGrad();
  auto group = group_;
  const int layer = layer_;
  const int64_t in = in_, outFeatures = out_, sliceOut = sliceOut_;
  return autograd::recordFunction(out, "ColumnParallelLinearBackward", inputs, [=, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    std::vector<Tensor> grads(1 + owned * (hasBias ? 2 : 1));
    std::vector<Tensor> partials;
    std::vector<const float*> sentErrors;
    const std::vector<int>& slicesOwned = group->owned();
    for (size_t k = 0; k < owned; ++k) {
      const int s = slicesOwned[k];
      Tensor dy = Tensor::empty({rows, sliceOut});
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dy.data<float>() + r * sliceOut, g.data<float>() + r * outFeatures + s * sliceOut,
                    static_cast<size_t>(sliceOut) * sizeof(float));
      }
      Tensor dw = Tensor::empty({sliceOut, in});
      Tensor db = hasBias ? Tensor::empty({sliceOut}) : Tensor();
      Tensor dx = gx ? Tensor::empty({rows, in}) : Tensor();
      backend.linearBackward(gx ? dx.data<float>() : nullptr, dw.data<float>(), hasBias ? db.data<float>() : nullptr,
                             dy.data<float>(), cx.data<float>(), ws[k].data<float>(), rows, in, sliceOut);
      grads[1 + k] = dw;
      if (hasBias) grads[1 + owned + k] = db;
      if (gx) {
        sentErrors.push_back(dx.data<float>());
        partials.push_back(std::move(dx));
      }
    }
    if (gx) {
      // The input gradient: every slice's partial product, summed in slice order on every rank.
      const auto errors = group->exchange(layer, ModelParallelGroup::Direction::Errors, sentErrors, rows * in);
      Tensor dx = Tensor::empty({rows, in});
      float* d = dx.data<float>();
      std::memcpy(d, errors[0].data(), static_cast<size_t>(rows * in) * sizeof(float));
      for (size_t s = 1; s < errors.size(); ++s) {
        const float* p = errors[s].data();
        for (int64_t i = 0; i < rows * in; ++i) d[i] += p[i];
      }
      grads[0] = dx;
    }
    return grads;
  });
}

std::vector<std::string> splitLinearLayers(nn::Module& model, const std::vector<std::string>& patterns,
                                           const std::shared_ptr<ModelParallelGroup>& group) {
  std::vector<std::string> linear, split;
  std::vector<std::pair<std::string, nn::Module*>> modules = model.namedModules();
  for (const auto& [name, module] : modules) {
    if (dynamic_cast<nn::Linear*>(module) != nullptr) linear.push_back(name);
  }
  for (const std::string& pattern : patterns) {
    const bool any = std::any_of(linear.begin(), linear.end(),
                                 [&](const std::string& n) { return precision::HybridPolicy::globMatch(pattern, n); });
    APS_CHECK(any, "parallel.split: '{}' matches no linear layer of the model (its linear layers: {})", pattern,
              fmt::format("{}", fmt::join(linear, ", ")));
  }
  for (const auto& entry : modules) {
    const std::string& name = entry.first;  // a plain reference: lambdas below capture it
    auto* layer = dynamic_cast<nn::Linear*>(entry.second);
    if (layer == nullptr) continue;
    if (!std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return precision::HybridPolicy::globMatch(p, name); }))
      continue;
    APS_CHECK(layer->weight().size(0) % group->size() == 0,
              "parallel.split: layer '{}' has {} output features, which parallel.model_parallel = {} does not divide",
              name, layer->weight().size(0), group->size());
    const auto dot = name.rfind('.');
    const std::string parentName = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string childName = dot == std::string::npos ? name : name.substr(dot + 1);
    nn::Module* parent = nullptr;
    for (const auto& [n, mod] : modules) {
      if (n == parentName) parent = mod;
    }
    APS_CHECK(parent != nullptr, "parallel.split: no parent module for '{}'", name);
    const int index = group->addLayer(name);
    parent->replaceChild(childName, std::make_shared<ColumnParallelLinear>(layer->weight(), layer->bias(), group, index));
    split.push_back(name);
  }
  return split;
}

int sliceOf(const std::string& name, std::string* whole) {
  const auto at = name.rfind("_mp");
  if (at == std::string::npos || at + 3 >= name.size() || at == 0) return -1;
  int s = 0;
  for (size_t i = at + 3; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || s > 100000) return -1;
    s = s * 10 + (name[i] - '0');
  }
  if (whole != nullptr) *whole = name.substr(0, at);
  return s;
}

NamedTensors joinSlices(const NamedTensors& state, ModelParallelGroup& group) {
  comm::Transport& transport = *group.options().transport;
  const int m = group.size();
  NamedTensors out;
  std::vector<std::string> joined;
  for (const auto& entry : state) {
    std::string whole;
    const int s = sliceOf(entry.name, &whole);
    if (s < 0) {
      out.push_back(entry);
      continue;
    }
    if (std::find(joined.begin(), joined.end(), whole) != joined.end()) continue;  // the whole is out already
    joined.push_back(whole);
    // This process's slices of `whole`, in slice order (the group's local ranks).
    std::vector<Tensor> mine;
    for (const int owned : group.owned()) {
      const std::string name = whole + "_mp" + std::to_string(owned);
      const auto it = std::find_if(state.begin(), state.end(), [&](const NamedTensor& e) { return e.name == name; });
      APS_CHECK(it != state.end(), "model parallelism: '{}' lacks its slice {}", whole, owned);
      mine.push_back(it->tensor.to(Device::cpu()).contiguous());
    }
    APS_CHECK(mine[0].dtype() == DType::Float32 && mine[0].dim() >= 1, "model parallelism: slice '{}' is no float tensor",
              entry.name);
    const size_t bytes = mine[0].buffer().bytes();
    std::vector<const void*> pointers;
    for (const Tensor& t : mine) pointers.push_back(t.rawData());
    Shape shape = mine[0].sizes();
    shape[0] *= m;
    Tensor full = Tensor::empty(shape);
    comm::allGatherBytes(transport, pointers, bytes, full.rawData());
    out.push_back({whole, full});
  }
  return out;
}

NamedTensors splitToSlices(const NamedTensors& whole, const NamedTensors& sliced, const ModelParallelGroup& group) {
  std::vector<std::string> splitNames;
  for (const auto& entry : sliced) {
    std::string name;
    if (sliceOf(entry.name, &name) >= 0 && std::find(splitNames.begin(), splitNames.end(), name) == splitNames.end())
      splitNames.push_back(name);
  }
  // "X" itself, or state keyed by it: "<kind>.X" (the optimizer's).
  auto isSplit = [&](const std::string& name) {
    const auto dot = name.find('.');
    return std::any_of(splitNames.begin(), splitNames.end(), [&](const std::string& x) {
      return name == x || (dot != std::string::npos && name.compare(dot + 1, std::string::npos, x) == 0);
    });
  };
  NamedTensors out;
  for (const auto& entry : whole) {
    if (!isSplit(entry.name)) {
      out.push_back(entry);
      continue;
    }
    const Tensor t = entry.tensor.contiguous();
    APS_CHECK(t.dim() >= 1 && t.size(0) % group.size() == 0,
              "model parallelism: '{}' of shape {} does not split over {} ranks", entry.name, t.shapeString(),
              group.size());
    const int64_t rows = t.size(0) / group.size();
    for (const int s : group.owned()) out.push_back({entry.name + "_mp" + std::to_string(s), t.narrow(0, s * rows, rows).contiguous()});
  }
  return out;
}

}  // namespace aps::train
