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
  jsonl +=
      R"({"bench":"allreduce","backend":"sim","algorithm":"ring/e4m3","codec":"e4m3","ranks":2,"elements":1,"time_s":5,"bytes_sent_per_rank":1})"
      "\n";
  const auto records = parseBenchJsonLines(jsonl);
  ASSERT_EQ(records.size(), 27u) << "sim records are skipped";
  AllReducePerfModel model;
  model.fit(records, bpv);
  EXPECT_NEAR(model.alpha(), alpha, alpha * 1e-3);
  EXPECT_NEAR(model.beta(), beta, beta * 1e-3);
  EXPECT_NEAR(model.gamma().at({"two_shot", "e4m3"}), 3e-9, 3e-12);
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

}  // namespace
}  // namespace aps::perfmodel
