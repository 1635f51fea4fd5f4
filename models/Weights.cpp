#include "models/Weights.h"

#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <vector>

namespace aps::models {

namespace {

// At most this many names per category in a message; the count says how many there are.
constexpr size_t kNamesShown = 8;

std::string listing(const std::string& what, const std::vector<std::string>& items) {
  if (items.empty()) return {};
  std::vector<std::string> shown(items.begin(),
                                 items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), kNamesShown)));
  return fmt::format("; {} {}: {}{}", items.size(), what, fmt::join(shown, ", "),
                     items.size() > kNamesShown ? ", ..." : "");
}

}  // namespace

void saveWeights(const nn::Module& model, const std::string& path) {
  // "format": "pt" is what safetensors.torch.save_file writes; PyTorch-side loaders expect it.
  io::saveSafetensors(path, model.stateDict(), {{"format", "pt"}});
}

void loadState(nn::Module& model, const NamedTensors& state, const std::string& source) {
  std::map<std::string, const Tensor*> given;
  for (const auto& entry : state) given.emplace(entry.name, &entry.tensor);
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> known;
  for (const auto& [name, target] : model.stateDict()) {
    known.insert(name);
    const auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second->sizes() != target.sizes()) {
      misshaped.push_back(fmt::format("{} (file {}, model {})", name, it->second->shapeString(), target.shapeString()));
    }
  }
  for (const auto& entry : state) {
    if (known.count(entry.name) == 0) unexpected.push_back(entry.name);
  }
  APS_CHECK(missing.empty() && unexpected.empty() && misshaped.empty(), "{}: does not match the {} model{}{}{}", source,
            model.typeName(), listing("missing keys", missing), listing("unexpected keys", unexpected),
            listing("mis-shaped keys", misshaped));
  model.loadStateDict(state, true);
}

void loadWeights(nn::Module& model, const std::string& path) {
  loadState(model, io::loadSafetensors(path).tensors, path);
}

}  // namespace aps::models
