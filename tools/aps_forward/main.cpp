// aps_forward: one eval-mode forward pass of a registry model on a tensor from a safetensors
// file, e.g. to compare against PyTorch on the same weights and input.
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

#include <string>

int main(int argc, char** argv) {
  CLI::App app{"Runs a model in eval mode on the tensor 'input' of a safetensors file and writes 'output'",
               "aps_forward"};
  std::string name, weights, input, output;
  aps::models::ModelOptions options;
  app.add_option("--model", name, "model name (aps_model --list)")->required();
  app.add_option("--num-classes", options.numClasses, "classes (default: the model's)")->check(CLI::PositiveNumber);
  app.add_option("--in-channels", options.inChannels, "input channels")->check(CLI::PositiveNumber);
  app.add_option("--weights", weights, "state dict (safetensors, torch names)")->required();
  app.add_option("--input", input, "safetensors file holding a float32 tensor named 'input' (N, C, H, W)")->required();
  app.add_option("--output", output, "safetensors file to write with the tensor 'output'")->required();
  return aps::runTool(app, argc, argv, [&] {
    auto model = aps::models::createModel(name, options);
    aps::models::loadWeights(*model, weights);
    const auto contents = aps::io::loadSafetensors(input);
    const aps::Tensor* x = nullptr;
    for (const auto& t : contents.tensors) {
      if (t.name == "input") x = &t.tensor;
    }
    APS_CHECK(x != nullptr, "{}: no tensor named 'input' ({} tensors in the file)", input, contents.tensors.size());
    model->eval();
    aps::autograd::NoGradGuard noGrad;
    const aps::Tensor y = model->forward(x->to(aps::DType::Float32));
    aps::io::saveSafetensors(output, {{"output", y}});
    fmt::print("{}: input {} -> output {} written to {}\n", name, x->shapeString(), y.shapeString(), output);
  });
}
