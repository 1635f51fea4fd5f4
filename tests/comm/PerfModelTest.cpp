// The perf model recovers known alpha, beta and gamma from synthetic benchmark records and
// predicts what the cost terms say.
#include "framework/core/Error.h"
#include "tools/aps_perfmodel/PerfModel.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

namespace aps::perfmodel {
namespace {

TEST(PerfModel, CostTermsFollowTheSchedules) {
  // two_shot at 4 ranks, 1000 values of 1 byte: 3 rounds of 3 messages, 2 * 3/4 * 1000 + 3 bytes.
  const AlgorithmCost t = algorithmCost("two_shot", 4, 1000, 1.0);
  EXPECT_DOUBLE_EQ(t.messages, 9.0);
  EXPECT_DOUBLE_EQ(t.bytes, 1503.0);
  EXPECT_DOUBLE_EQ(algorithmCost("allgather_rounded", 4, 1000, 1.0).bytes, 3003.0);
  EXPECT_DOUBLE_EQ(algorithmCost("native", 4, 1000, 1.0).bytes, 6003.0);
  EXPECT_THROW(algorithmCost("butterfly", 4, 1000, 1.0), Error);
  EXPECT_EQ(algorithmFamily("allgather_kahan/e4m3"), "allgather_kahan");
}

TEST(PerfModel, FitRecoversTheParameters) {
  const double alpha = 20e-6, beta = 1.0 / 2e9;
  const std::map<std::string, double> bpv{{"fp32", 4.0}, {"e4m3", 1.0}};
  const std::map<std::string, double> gamma{{"native", 0.5e-9}, {"two_shot", 3e-9}, {"ring", 4e-9}};
  std::string jsonl;
  for (int ranks : {2, 3, 4})
    for (int64_t n : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 22})
      for (const auto& [family, g] : gamma) {
        const std::string codec = family == "native" ? "fp32" : "e4m3";
        const AlgorithmCost c = algorithmCost(family, ranks, n, bpv.at(codec));
        const double t = alpha * c.messages + beta * c.bytes + g * c.work;
        jsonl += fmt::format(
            R"({{"bench":"allreduce","backend":"mpi","algorithm":"{}/{}","codec":"{}","ranks":{},"elements":{},"time_s":{},"bytes_sent_per_rank":{}}})"
            "\n",
            family, codec, codec, ranks, n, t, static_cast<uint64_t>(c.bytes));
      }
  // MPI_Allreduce: its own (slower) protocol on the same network.
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 22}) {
    const AlgorithmCost c = algorithmCost("mpi_allreduce", 4, n, 4.0);
    jsonl += fmt::format(
        R"({{"bench":"allreduce","backend":"mpi","algorithm":"mpi_allreduce","codec":"fp32","ranks":4,"elements":{},"time_s":{}}})"
        "\n",
        n, 50e-6 * c.messages + c.bytes / 1e9);
  }
  jsonl +=
      R"({"bench":"allreduce","backend":"sim","algorithm":"ring/e4m3","codec":"e4m3","ranks":2,"elements":1,"time_s":5,"bytes_sent_per_rank":1})"
      "\n";
  const auto records = parseBenchJsonLines(jsonl);
  ASSERT_EQ(records.size(), 30u) << "sim records are skipped";
  AllReducePerfModel model;
  model.fit(records, bpv);
  EXPECT_NEAR(model.alpha(), alpha, alpha * 1e-3);
  EXPECT_NEAR(model.beta(), beta, beta * 1e-3);
  EXPECT_NEAR(model.gamma().at({"two_shot", "e4m3"}), 3e-9, 3e-12);
  EXPECT_NEAR(model.mpiAlpha(), 50e-6, 50e-9);
  EXPECT_NEAR(model.mpiBeta(), 1e-9, 1e-12);
  EXPECT_LT(model.medianRelativeError(), 1e-6);
  // Predictions are the cost terms under the fitted parameters; with a slow codec on a fast
  // network the 1-byte format loses to fp32, on a slow network it wins.
  const int64_t n = int64_t{25} << 20;
  const AlgorithmCost c = algorithmCost("two_shot", 1024, n, 1.0);
  EXPECT_NEAR(model.predict({"two_shot", "e4m3"}, 1024, n, 1.0), alpha * c.messages + beta * c.bytes + 3e-9 * c.work,
              1e-6);
  model.setNetwork(alpha, 1.0 / 1e8);  // 0.1 GB/s
  EXPECT_GT(model.predict({"native", "fp32"}, 1024, n, 4.0) / model.predict({"two_shot", "e4m3"}, 1024, n, 1.0), 2.0);
  EXPECT_EQ(model.predict({"native", "fp32"}, 1, 1000, 4.0), 0.0);
  EXPECT_THROW(model.predict({"ring", "fp16"}, 4, 10, 2.0), Error);
  EXPECT_THROW(parseBenchJsonLines("{not json\n"), Error);
}

TEST(PerfModel, StepTimeHidesBucketsBehindBackwardExceptTheLast) {
  AllReducePerfModel model;
  // Network only (no codec term): alpha 10 us, 1 GB/s; fit on exact synthetic records.
  std::string jsonl;
  for (int64_t n : {int64_t{1} << 12, int64_t{1} << 20, int64_t{1} << 24}) {
    const AlgorithmCost c = algorithmCost("native", 4, n, 4.0);
    jsonl += fmt::format(
        R"({{"bench":"allreduce","backend":"mpi","algorithm":"native/fp32","codec":"fp32","ranks":4,"elements":{},"time_s":{},"bytes_sent_per_rank":{}}})"
        "\n",
        n, 10e-6 * c.messages + 1e-9 * c.bytes, static_cast<uint64_t>(c.bytes));
  }
  model.fit(parseBenchJsonLines(jsonl), {{"fp32", 4.0}});
  const AllReducePerfModel::Key key{"native", "fp32"};
  StepShape shape;
  shape.elements = 4 << 20;  // 4 buckets of 1M values
  shape.bucketElements = 1 << 20;
  shape.layers = 100;
  shape.forwardSeconds = 0.01;
  const double bucket = model.predict(key, 4, 1 << 20, 4.0);
  // No backward to hide behind: everything is exposed.
  StepPrediction p = predictStep(model, key, 4, 4.0, shape);
  EXPECT_NEAR(p.commSeconds, 4 * bucket, 1e-9);
  EXPECT_NEAR(p.exposedSeconds, p.commSeconds, 1e-9);
  EXPECT_NEAR(p.stepSeconds, 0.01 + p.commSeconds, 1e-9);
  // A long backward hides all but the last bucket.
  shape.backwardSeconds = 1.0;
  p = predictStep(model, key, 4, 4.0, shape);
  EXPECT_NEAR(p.exposedSeconds, bucket, 1e-9);
  EXPECT_NEAR(p.stepSeconds, 1.01 + bucket, 1e-9);
  // A short one hides that much.
  shape.backwardSeconds = bucket;
  p = predictStep(model, key, 4, 4.0, shape);
  EXPECT_NEAR(p.exposedSeconds, 3 * bucket, 1e-9);
  // APS: one agreement per bucket, (N-1) messages each, 4 bytes per layer to each other rank.
  shape.aps = true;
  const StepPrediction withAps = predictStep(model, key, 4, 4.0, shape);
  EXPECT_NEAR(withAps.commSeconds - p.commSeconds, model.alpha() * 3 * 4 + model.beta() * 3 * 4 * 100, 1e-9);
  // One rank: nothing to communicate.
  EXPECT_EQ(predictStep(model, key, 1, 4.0, shape).exposedSeconds, 0.0);
}

}  // namespace
}  // namespace aps::perfmodel
