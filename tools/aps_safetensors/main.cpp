// aps_safetensors: validates a safetensors file (model, checkpoint, fixture) and lists its
// metadata and tensors with simple statistics.
#include "framework/io/Safetensors.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

int main(int argc, char** argv) {
  CLI::App app{"Validates a safetensors file and lists its metadata and tensors", "aps_safetensors"};
  std::string path;
  app.add_option("file", path, "the .safetensors file")->required();
  return aps::runTool(app, argc, argv,
                      [&] { fmt::print("{}", aps::io::describeSafetensors(aps::io::loadSafetensors(path))); });
}
