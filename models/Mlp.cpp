#include "models/Mlp.h"

#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Shaping.h"

#include <string>
#include <utility>

namespace aps::models {

Mlp::Mlp(std::vector<int64_t> widths, int64_t numClasses, uint64_t seed) : Module("Mlp"), widths_(std::move(widths)) {
  APS_CHECK(!widths_.empty(), "mlp: model.widths is empty; it lists the input features first (784 for 28 x 28 x 1)");
  for (const int64_t w : widths_) APS_CHECK(w > 0, "mlp: model.widths holds {}; every width must be > 0", w);
  APS_CHECK(numClasses > 0, "mlp: num_classes = {} must be > 0", numClasses);
  Rng rng(seed);
  std::vector<int64_t> sizes = widths_;
  sizes.push_back(numClasses);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    registerModule("fc" + std::to_string(i + 1), std::make_shared<nn::Linear>(sizes[i], sizes[i + 1], rng));
  }
}

Tensor Mlp::forward(const Tensor& input) {
  Tensor x = input.dim() > 2 ? ops::flatten(input, 1) : input;
  APS_CHECK(x.dim() == 2 && x.size(1) == widths_.front(),
            "mlp: an input of {} features per sample where model.widths[0] = {} (set it to the dataset's C x H x W)",
            x.dim() == 2 ? x.size(1) : x.numel(), widths_.front());
  // The layers through namedChildren(): parallel.split may replace them with their split form.
  const auto layers = namedChildren();
  for (size_t i = 0; i < layers.size(); ++i) {
    x = layers[i].second->forward(x);
    if (i + 1 < layers.size()) x = ops::relu(x);
  }
  return x;
}

}  // namespace aps::models
