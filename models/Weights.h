#pragma once

#include "framework/nn/Module.h"
#include "framework/tensor/NamedTensor.h"

#include <string>

namespace aps::models {

// A model's state dict (parameters and buffers, torch's names and order) as a safetensors file
// that PyTorch reads with safetensors.torch.load_file and model.load_state_dict, and back.
// Saving is atomic (framework/io).
void saveWeights(const nn::Module& model, const std::string& path);
// The same from a state dict (a model's, its split layers made whole).
void saveWeights(const NamedTensors& state, const std::string& path);
// Strict: every key of the model must be in the file with the model's shape, and the file may
// hold no other key. Otherwise throws aps::Error naming the file and every missing, unexpected
// and mis-shaped key (the model is left unchanged).
void loadWeights(nn::Module& model, const std::string& path);
// The same check and copy for a state already in memory; `source` names it in errors.
void loadState(nn::Module& model, const NamedTensors& state, const std::string& source);

// Renames of file keys for initialFrom: the first entry whose `from` begins a key replaces
// that beginning with `to` ({"", "backbone."} puts a torchvision ResNet under an FCN's backbone).
struct KeyRename {
  std::string from, to;
};
// "FROM=TO,FROM=TO" (model.init_map); throws aps::Error naming the entry without '='.
std::vector<KeyRename> parseKeyRenames(const std::string& text);

// What initialFrom did: tensors copied, the model's keys the file left as initialised, the
// file's keys the model has no place for.
struct InitReport {
  int64_t loaded = 0;
  std::vector<std::string> missing, unexpected;
  std::string summary() const;  // "120 tensors loaded; 2 missing keys: ...; 2 unexpected keys: ..."
};
// Initial weights from a safetensors file (model.init_from), not strict: every key the file and
// the model share (after `renames`) is copied; a shared key with another shape throws
// aps::Error naming the file, the key and both shapes (the model is then unchanged).
InitReport initialFrom(nn::Module& model, const std::string& path, const std::vector<KeyRename>& renames);

}  // namespace aps::models
