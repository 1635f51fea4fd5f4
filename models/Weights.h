#pragma once

#include "framework/nn/Module.h"
#include "framework/tensor/NamedTensor.h"

#include <string>

namespace aps::models {

// A model's state dict (parameters and buffers, torch's names and order) as a safetensors file
// that PyTorch reads with safetensors.torch.load_file and model.load_state_dict, and back.
// Saving is atomic (framework/io).
void saveWeights(const nn::Module& model, const std::string& path);
// Strict: every key of the model must be in the file with the model's shape, and the file may
// hold no other key. Otherwise throws aps::Error naming the file and every missing, unexpected
// and mis-shaped key (the model is left unchanged).
void loadWeights(nn::Module& model, const std::string& path);
// The same check and copy for a state already in memory; `source` names it in errors.
void loadState(nn::Module& model, const NamedTensors& state, const std::string& source);

}  // namespace aps::models
