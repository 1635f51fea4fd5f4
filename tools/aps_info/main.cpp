// aps_info: what this build of aps is and what it can use on this machine.
#include "framework/core/Parallel.h"
#include "framework/core/Version.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "tools/common/ToolMain.h"

#include <fmt/format.h>

int main(int argc, char** argv) {
  CLI::App app{"Prints the aps version, build options and the devices this machine offers", "aps_info"};
  return aps::runTool(app, argc, argv, [] {
    fmt::print("aps {}\n", APS_VERSION);
    fmt::print("cpu threads: {}\n", aps::numThreads());
    fmt::print("huge pages: {}\n", aps::hugePagesStatus());
    fmt::print("cuda backend: {}\n", aps::cuda::compiledWithCuda() ? "built" : "not built");
    const int gpus = aps::cuda::deviceCount();
    fmt::print("cuda devices: {}\n", gpus);
    for (int i = 0; i < gpus; ++i) fmt::print("  [{}] {}\n", i, aps::cuda::deviceDescription(i));
  });
}
