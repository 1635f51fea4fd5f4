// aps_model: the parameter table of a model from the registry (models/ModelRegistry.h).
#include "framework/core/Error.h"
#include "models/ModelRegistry.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

namespace {

// 11689512 -> "11,689,512": counts are read against published figures written this way.
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value);
  for (int64_t i = static_cast<int64_t>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prints a model's parameters (name, shape, count) and their total", "aps_model"};
  std::string name;
  aps::models::ModelOptions options;
  bool list = false;
  app.add_option("--model", name, "model name (see --list)");
  app.add_option("--num-classes", options.numClasses, "classes (default: the model's)")->check(CLI::PositiveNumber);
  app.add_option("--in-channels", options.inChannels, "input channels")->check(CLI::PositiveNumber);
  app.add_option("--widths", options.widths, "mlp: input features, then hidden widths (e.g. 784,1200,1200)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000}));
  app.add_flag("--list", list, "print the known model names and exit");
  return aps::runTool(app, argc, argv, [&] {
    if (list || name.empty()) {
      for (const auto& info : aps::models::modelCatalog()) fmt::print("{:<16} {}\n", info.name, info.description);
      APS_CHECK(list, "--model is required (one of the names above)");
      return;
    }
    const auto model = aps::models::createModel(name, options);
    const auto params = model->namedParameters();
    size_t width = 4;
    for (const auto& p : params) width = std::max(width, p.name.size());
    fmt::print("{:<{}}  {:<18} {:>12}\n", "name", width, "shape", "count");
    int64_t total = 0;
    for (const auto& p : params) {
      fmt::print("{:<{}}  {:<18} {:>12}\n", p.name, width, p.tensor.shapeString(), grouped(p.tensor.numel()));
      total += p.tensor.numel();
    }
    fmt::print("total: {} parameters in {} tensors ({} buffers)\n", grouped(total), params.size(),
               model->namedBuffers().size());
  });
}
