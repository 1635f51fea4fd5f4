// libFuzzer harness for resuming from a checkpoint, as the trainer does it: the safetensors
// parser, the format and checksum of train::loadCheckpoint, then train::restoreTrainingState's
// checks of the header against the run (model, config hash, position) and of every tensor
// against a small model, its optimizer and schedule. Any input must restore or throw aps::Error.
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/nn/Conv2d.h"
#include "framework/optim/ConstantLr.h"
#include "framework/optim/LrScheduler.h"
#include "framework/optim/Sgd.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Restore.h"
#include "tests/fuzz/FuzzFiles.h"

#include <memory>

namespace {
// The seeds' model: one 1x1 convolution named conv1.
class Tiny : public aps::nn::Module {
 public:
  explicit Tiny(aps::Rng& rng) : Module("Tiny") {
    registerModule("conv1", std::make_shared<aps::nn::Conv2d>(
                                aps::nn::Conv2dSpec{.in = 1, .out = 2, .kernel = 1, .bias = false}, rng));
  }
  aps::Tensor forward(const aps::Tensor& input) override { return input; }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = aps::fuzz::writeScratchFile("checkpoint-0000000001.safetensors", data, size);
  try {
    const auto c = aps::train::loadCheckpoint(path);
    // The run of the seeds (tools/fixtures/make_fuzz_seeds.py): model "resnet20" standing for
    // a one-conv model, config hash deadbeef, 4 steps per epoch, 100 steps.
    aps::Rng rng(1);
    auto model = std::make_shared<Tiny>(rng);
    auto params = model->namedParameters();
    aps::optim::Sgd optimizer(params, {.lr = 0.1, .momentum = 0.9});
    aps::optim::LrScheduler scheduler(std::make_shared<aps::optim::ConstantLr>(0.1), optimizer);
    // A stored config (checkpoint metadata "config") is compared key by key with this one.
    const aps::train::RunIdentity run{"resnet20", 0xdeadbeef, 4, 100, "model: {name: resnet20}\n", {}};
    aps::train::restoreTrainingState(c, path, run, *model, optimizer, scheduler);
  } catch (const aps::Error&) {
  }
  return 0;
}
