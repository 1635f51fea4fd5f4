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

void saveWeights(const nn::Module& model, const std::string& path) { saveWeights(model.stateDict(), path); }

void saveWeights(const NamedTensors& state, const std::string& path) {
  // "format": "pt" is what safetensors.torch.save_file writes; PyTorch-side loaders expect it.
  // A model on a GPU writes the same file, from host copies.
  io::saveSafetensors(path, onDevice(state, Device::cpu()), {{"format", "pt"}});
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

std::vector<KeyRename> parseKeyRenames(const std::string& text) {
  std::vector<KeyRename> out;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const size_t eq = item.find('=');
    APS_CHECK(eq != std::string::npos, "model.init_map: '{}' is not FROM=TO (e.g. '=backbone.' or 'module.=')", item);
    out.push_back({item.substr(0, eq), item.substr(eq + 1)});
    begin = end + 1;
  }
  return out;
}

std::string InitReport::summary() const {
  return fmt::format("{} tensors loaded{}{}", loaded, listing("missing keys (left as initialised)", missing),
                     listing("unexpected keys (ignored)", unexpected));
}

InitReport initialFrom(nn::Module& model, const std::string& path, const std::vector<KeyRename>& renames) {
  const auto file = io::loadSafetensors(path);
  std::map<std::string, Tensor> target;
  for (const auto& [name, tensor] : model.stateDict()) target.emplace(name, tensor);
  InitReport report;
  NamedTensors chosen;
  std::set<std::string> covered;
  for (const auto& [fileKey, tensor] : file.tensors) {
    std::string key = fileKey;
    for (const auto& r : renames) {
      if (key.compare(0, r.from.size(), r.from) == 0) {
        key = r.to + key.substr(r.from.size());
        break;
      }
    }
    const auto it = target.find(key);
    if (it == target.end()) {
      report.unexpected.push_back(fileKey);
      continue;
    }
    APS_CHECK(it->second.sizes() == tensor.sizes(),
              "model.init_from '{}': '{}' (model key '{}') is {} in the file, {} "
              "in the model",
              path, fileKey, key, tensor.shapeString(), it->second.shapeString());
    chosen.push_back({key, tensor});
    covered.insert(key);
  }
  for (const auto& [name, tensor] : model.stateDict()) {
    if (!covered.count(name)) report.missing.push_back(name);
  }
  model.loadStateDict(chosen, false);
  report.loaded = static_cast<int64_t>(chosen.size());
  return report;
}

void loadWeights(nn::Module& model, const std::string& path) {
  loadState(model, io::loadSafetensors(path).tensors, path);
}

}  // namespace aps::models
