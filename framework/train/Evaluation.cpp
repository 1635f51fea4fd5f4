#include "framework/train/Evaluation.h"

#include "data/Loader.h"
#include "framework/autograd/GradMode.h"
#include "framework/nn/Module.h"
#include "framework/ops/Loss.h"

#include <algorithm>

namespace aps::train {

namespace {

EvalAccumulator evaluateShard(nn::Module& model, const std::shared_ptr<const data::Dataset>& testSet,
                              const EvalSetup& setup, int shard) {
  int64_t size = testSet->size();
  if (setup.samples > 0) size = std::min(size, setup.samples);
  std::vector<int64_t> indices;
  for (int64_t i = shard; i < size; i += setup.shards) indices.push_back(i);
  data::Loader loader(testSet, {setup.batchSize, setup.workers, setup.prefetch, false, setup.seed});
  loader.startEpoch(0, indices);
  EvalAccumulator totals(setup.segmentation, setup.classes);
  const auto parameters = model.parameters();
  const Device device = parameters.empty() ? Device::cpu() : parameters.front().device();
  data::Batch batch;
  while (loader.next(batch)) {
    const Tensor images = Tensor::fromVector(std::span<const float>(batch.images), batch.imageShape).to(device);
    const Tensor labels = Tensor::fromVector(std::span<const int64_t>(batch.labels), batch.labelShape).to(device);
    const Tensor deviceLogits = model.forward(images).contiguous();
    const Tensor logits = deviceLogits.to(Device::cpu());  // the accumulator reads host memory
    if (!setup.segmentation) {
      const double meanLoss = ops::crossEntropy(deviceLogits, labels).item();
      totals.addClassification(logits.data<float>(), batch.labels.data(), batch.size(), meanLoss);
    } else {
      totals.addSegmentation(logits.data<float>(), batch.labels.data(), batch.size(),
                             batch.imageShape[2] * batch.imageShape[3]);
    }
  }
  return totals;
}

}  // namespace

TrainSummary evaluate(nn::Module& model, const std::shared_ptr<const data::Dataset>& testSet, const EvalSetup& setup) {
  model.eval();
  autograd::NoGradGuard noGrad;
  autograd::ComputePrecisionGuard precisionGuard(setup.compute);
  std::vector<EvalAccumulator> local;
  for (int i = 0; i < setup.localShards; ++i)
    local.push_back(evaluateShard(model, testSet, setup, setup.firstShard + i));
  model.train();
  return EvalAccumulator::mergeOverRanks(local, setup.sumCounts, setup.sumDoubles).summary();
}

}  // namespace aps::train
