// The perf model recovers known latency, bandwidth and codec factor from synthetic benchmark records and
// predicts what the cost terms say.
#include "framework/core/Error.h"
#include "tools/aps_perfmodel/PerfModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>

namespace aps::perfmodel {
namespace {

// One core's codec rates (values/s) for the synthetic records.
const std::map<std::string, CodecRates> kRates{{"fp32", {2e9, 2e9, 2.5e9, 2e9}}, {"e4m3", {1e9, 3e9, 3e9, 0.5e9}}};
const std::map<std::string, double> kBytes{{"fp32", 4.0}, {"e4m3", 1.0}};

std::string record(const std::string& family, const std::string& codec, int ranks, int64_t n, double seconds,
                   double bytes, int64_t segmentBytes = 0) {
  return fmt::format(
      R"({{"bench":"allreduce","backend":"mpi","algorithm":"{}{}","codec":"{}","ranks":{},"elements":{},"time_s":{},"bytes_sent_per_rank":{},"segment_bytes":{}}})"
      "\n",
      family, family == "mpi_allreduce" ? "" : "/" + codec, codec, ranks, n, seconds, static_cast<uint64_t>(bytes),
      segmentBytes);
}

// Exact records of aps's algorithms under (alpha, beta, kappa) at the given sizes.
std::string apsRecords(double alpha, double beta, double kappa, std::initializer_list<int64_t> sizes) {
  std::string jsonl;
  for (int ranks : {2, 3, 4})
    for (int64_t n : sizes)
      for (const std::string family : {"native", "two_shot", "ring"}) {
        const std::string codec = family == "native" ? "fp32" : "e4m3";
        const AlgorithmCost c = algorithmCost(family, ranks, n, kBytes.at(codec));
        jsonl += record(family, codec, ranks, n,
                        alpha * c.messages + beta * c.bytes + kappa * c.codecSeconds(kRates.at(codec)), c.bytes);
      }
  return jsonl;
}

TEST(PerfModel, CostTermsFollowTheSchedules) {
  // two_shot at 4 ranks, 1000 values of 1 byte: 3 rounds of 3 messages, 2 * 3/4 * 1000 + 3 bytes.
  const AlgorithmCost t = algorithmCost("two_shot", 4, 1000, 1.0);
  EXPECT_DOUBLE_EQ(t.messages, 9.0);
  EXPECT_DOUBLE_EQ(t.bytes, 1503.0);
  // Encode the input (1000) and the owned sum (250); decode the first contribution (250) and
  // the gathered sums (1000); decode-add the other three contributions (750).
  EXPECT_DOUBLE_EQ(t.encodeValues, 1250.0);
  EXPECT_DOUBLE_EQ(t.decodeValues, 1250.0);
  EXPECT_DOUBLE_EQ(t.decodeAddValues, 750.0);
  EXPECT_DOUBLE_EQ(t.decodeAddEncodeValues, 0.0);
  EXPECT_DOUBLE_EQ(t.codecSeconds({1000.0, 500.0, 250.0, 1.0}), 1.25 + 2.5 + 3.0);
  // ring: three hops of a 250-value decode-add-encode.
  EXPECT_DOUBLE_EQ(algorithmCost("ring", 4, 1000, 1.0).decodeAddEncodeValues, 750.0);
  EXPECT_DOUBLE_EQ(algorithmCost("allgather_rounded", 4, 1000, 1.0).bytes, 3003.0);
  EXPECT_DOUBLE_EQ(algorithmCost("allgather_rounded", 4, 1000, 1.0).decodeAddEncodeValues, 3000.0);
  EXPECT_DOUBLE_EQ(algorithmCost("native", 4, 1000, 1.0).bytes, 6003.0);
  EXPECT_DOUBLE_EQ(algorithmCost("mpi_allreduce", 4, 1000, 4.0).codecSeconds({1.0, 1.0, 1.0, 1.0}), 0.0);
  EXPECT_THROW(algorithmCost("butterfly", 4, 1000, 1.0), Error);
  EXPECT_EQ(algorithmFamily("allgather_kahan/e4m3"), "allgather_kahan");
}

TEST(PerfModel, APipelinedTwoShotSendsMoreRoundsAndHidesTheSmallerTerm) {
  // 4 ranks, 4 M values of 1 byte: chunks of 1 MB, 64 KiB segments -> 16 segments per chunk,
  // each an all-to-all and an all-gather round, plus the flag round.
  const AlgorithmCost c = algorithmCost("two_shot", 4, int64_t{4} << 20, 1.0, int64_t{64} << 10);
  EXPECT_DOUBLE_EQ(c.segments, 16.0);
  EXPECT_DOUBLE_EQ(c.messages, 3.0 * 33.0);
  EXPECT_DOUBLE_EQ(c.bytes, algorithmCost("two_shot", 4, int64_t{4} << 20, 1.0).bytes);
  EXPECT_DOUBLE_EQ(algorithmCost("two_shot", 4, 1000, 1.0, int64_t{1} << 20).segments, 1.0);
  EXPECT_DOUBLE_EQ(algorithmCost("ring", 4, int64_t{4} << 20, 1.0, int64_t{64} << 10).segments, 1.0);
  // No pipeline: the terms add up; a long one: the larger term and 1/S of the smaller.
  EXPECT_DOUBLE_EQ(overlapped(3.0, 1.0, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(overlapped(3.0, 1.0, 4.0), 3.25);
  EXPECT_DOUBLE_EQ(overlapped(1.0, 3.0, 4.0), 3.25);
}

// Pipelined two_shot records, wire-bound at 1 GB/s for fp32 and codec-bound at small segments
// for a slow 1-byte codec, beside unpipelined ring records, timed by the model with `efficiency`.
const std::map<std::string, CodecRates> kPipelineRates{{"fp32", {2e9, 2e9, 2e9, 2e9}}, {"e4m3", {1e8, 1e8, 1e8, 1e8}}};
std::string pipelinedRecords(double alpha, double beta, double kappa, double efficiency) {
  std::string jsonl;
  for (int64_t n : {int64_t{1} << 12, int64_t{1} << 18, int64_t{1} << 22, int64_t{1} << 24}) {
    for (const std::string family : {"native", "two_shot", "ring"}) {
      const std::string codec = family == "native" ? "fp32" : "e4m3";
      const int64_t segment = family == "ring" ? 0 : int64_t{256} << 10;
      const AlgorithmCost c = algorithmCost(family, 4, n, kBytes.at(codec), segment);
      const double t = alpha * c.messages + overlapped(beta * c.bytes, kappa * c.codecSeconds(kPipelineRates.at(codec)),
                                                       c.segments, efficiency);
      jsonl += record(family, codec, 4, n, t, c.bytes, segment);
    }
  }
  return jsonl;
}

TEST(PerfModel, FitRecoversTheNetworkFromPipelinedRecordsOnBothSidesOfTheOverlap) {
  const double alpha = 30e-6, beta = 1e-9, kappa = 2.0;
  const auto& rates = kPipelineRates;
  const std::string jsonl = pipelinedRecords(alpha, beta, kappa, 1.0);
  AllReducePerfModel model;
  model.fit(parseBenchJsonLines(jsonl), kBytes, rates, kappa);
  EXPECT_EQ(model.overlapEfficiency(), 1.0);
  EXPECT_NEAR(model.alpha(), alpha, alpha * 1e-3);
  EXPECT_NEAR(model.beta(), beta, beta * 1e-3);
  EXPECT_LT(model.medianRelativeError(), 1e-6);
  const int64_t n = int64_t{1} << 24;
  const AlgorithmCost c = algorithmCost("two_shot", 4, n, 1.0, AllReducePerfModel::kPipelineSegmentBytes);
  EXPECT_NEAR(model.predict({"two_shot", "e4m3"}, 4, n, 1.0),
              alpha * c.messages + overlapped(beta * c.bytes, kappa * c.codecSeconds(rates.at("e4m3")), c.segments),
              1e-9);
  // Without its pipeline the same all-reduce would pay wire and codec in full.
  EXPECT_GT(model.predict({"two_shot", "e4m3"}, 4, n, 1.0, 0), model.predict({"two_shot", "e4m3"}, 4, n, 1.0));
}

TEST(PerfModel, FitFindsHowMuchOfTheSmallerTermThePipelineHides) {
  // The same records as above, but the pipeline hides only 60% of the smaller term (codec
  // work sharing cores with the network stack): the fit finds 0.6 and the network beside it;
  // at the ideal 1 (the test above) it keeps 1.
  const double alpha = 30e-6, beta = 1e-9, kappa = 2.0, efficiency = 0.6;
  const auto& rates = kPipelineRates;
  const std::string jsonl = pipelinedRecords(alpha, beta, kappa, efficiency);
  AllReducePerfModel model;
  model.fit(parseBenchJsonLines(jsonl), kBytes, rates, kappa);
  EXPECT_NEAR(model.overlapEfficiency(), efficiency, 1e-9);
  EXPECT_NEAR(model.alpha(), alpha, alpha * 1e-3);
  EXPECT_NEAR(model.beta(), beta, beta * 1e-3);
  EXPECT_LT(model.medianRelativeError(), 1e-6);
  const int64_t n = int64_t{1} << 24;
  const AlgorithmCost c = algorithmCost("two_shot", 4, n, 1.0, AllReducePerfModel::kPipelineSegmentBytes);
  EXPECT_NEAR(
      model.predict({"two_shot", "e4m3"}, 4, n, 1.0),
      alpha * c.messages + overlapped(beta * c.bytes, kappa * c.codecSeconds(rates.at("e4m3")), c.segments, efficiency),
      1e-9);
  EXPECT_DOUBLE_EQ(overlapped(3.0, 1.0, 4.0, 0.5), 3.625);
}

TEST(PerfModel, CodecRatesComeFromApsBenchCodec) {
  const auto rates = parseCodecBench(R"({"values": 16, "codecs": [{"codec": "e4m3", "encode_values_per_s": 2e9,
      "decode_values_per_s": 4e9, "decode_add_values_per_s": 3e9, "decode_add_encode_values_per_s": 1e9,
      "encode_vs_copy": 1.2}]})");
  ASSERT_EQ(rates.count("e4m3"), 1u);
  EXPECT_EQ(rates.at("e4m3").encode, 2e9);
  EXPECT_EQ(rates.at("e4m3").decode, 4e9);
  EXPECT_EQ(rates.at("e4m3").decodeAdd, 3e9);
  EXPECT_EQ(rates.at("e4m3").decodeAddEncode, 1e9);
  EXPECT_THROW(parseCodecBench("[1, 2"), Error);
  EXPECT_THROW(parseCodecBench(R"({"codecs": [{"codec": "e4m3", "encode_values_per_s": 2e9}]})"), Error);
  EXPECT_THROW(parseCodecBench(R"({"codecs": [{"codec": "e4m3", "encode_values_per_s": 0,
      "decode_values_per_s": 4e9, "decode_add_values_per_s": 3e9, "decode_add_encode_values_per_s": 1e9}]})"),
               Error);
}

TEST(PerfModel, FitRecoversLatencyAndBandwidthBesideMeasuredCodecWork) {
  const double alpha = 20e-6, beta = 1.0 / 2e9, kappa = 2.0;
  std::string jsonl = apsRecords(alpha, beta, kappa, {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 22});
  // MPI_Allreduce: its own (slower) protocol on the same network.
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 22}) {
    const AlgorithmCost c = algorithmCost("mpi_allreduce", 4, n, 4.0);
    jsonl += record("mpi_allreduce", "fp32", 4, n, 50e-6 * c.messages + c.bytes / 1e9, 0);
  }
  jsonl +=
      R"({"bench":"allreduce","backend":"sim","algorithm":"ring/e4m3","codec":"e4m3","ranks":2,"elements":1,"time_s":5,"bytes_sent_per_rank":1})"
      "\n";
  const auto records = parseBenchJsonLines(jsonl);
  ASSERT_EQ(records.size(), 30u) << "sim records are skipped";
  AllReducePerfModel model;
  model.fit(records, kBytes, kRates, kappa);
  EXPECT_NEAR(model.alpha(), alpha, alpha * 1e-3);
  EXPECT_NEAR(model.beta(), beta, beta * 1e-3);
  EXPECT_EQ(model.kappa(), kappa);
  EXPECT_NEAR(model.mpiAlpha(), 50e-6, 50e-9);
  EXPECT_NEAR(model.mpiBeta(), 1e-9, 1e-12);
  EXPECT_LT(model.medianRelativeError(), 1e-6);
  // The codec work is taken as given: the wrong slowdown shows in the fit, not hidden in it.
  AllReducePerfModel wrong;
  wrong.fit(records, kBytes, kRates, 1.0);
  EXPECT_GT(wrong.medianRelativeError(), 1e-3);
  EXPECT_THROW(wrong.fit(records, kBytes, kRates, 0.0), Error);
  EXPECT_TRUE(model.knows({"ring", "e4m3"}));
  EXPECT_FALSE(model.knows({"ring", "fp32"}));
  // Predictions are the cost terms under the fitted parameters; with a slow codec on a fast
  // network the 1-byte format gains little over fp32, on a slow one it nears the 4x of its bytes.
  const int64_t n = int64_t{25} << 20;
  const AlgorithmCost c = algorithmCost("two_shot", 1024, n, 1.0);
  EXPECT_NEAR(model.predict({"two_shot", "e4m3"}, 1024, n, 1.0),
              alpha * c.messages + beta * c.bytes + kappa * c.codecSeconds(kRates.at("e4m3")), 1e-6);
  const double fastRatio =
      model.predict({"native", "fp32"}, 1024, n, 4.0) / model.predict({"two_shot", "e4m3"}, 1024, n, 1.0);
  model.setNetwork(alpha, 1.0 / 1e8);  // 0.1 GB/s
  const double slowRatio =
      model.predict({"native", "fp32"}, 1024, n, 4.0) / model.predict({"two_shot", "e4m3"}, 1024, n, 1.0);
  EXPECT_LT(fastRatio, 2.0);
  EXPECT_GT(slowRatio, 3.0);
  EXPECT_LT(slowRatio, 4.0);
  EXPECT_EQ(model.predict({"native", "fp32"}, 1, 1000, 4.0), 0.0);
  EXPECT_THROW(model.predict({"ring", "fp16"}, 4, 10, 2.0), Error);
  EXPECT_THROW(parseBenchJsonLines("{not json\n"), Error);
}

TEST(PerfModel, WeighingEachTimeByHowWellItIsKnownPredictsLargeSizesBetter) {
  // A 1 Gbit/s network with 30 us per message and no overlap, and MPI_Allreduce on it, timed as
  // an emulated cluster with more ranks than cores times them: each time comes in whole 4 ms
  // scheduler slices (from a clock of random phase, so unbiased) and long ones drift by 3%.
  // A short time is known to about a slice, a long one to a few percent. Over 200 such
  // calibrations, the fit weighted that way (TimingNoise's default: the fastest record's time
  // and 5%) predicts ResNet-50's gradient, between the two largest calibration sizes, better
  // than a fit on relative error alone (a resolution far below the slice), which lets the
  // small records' whole slices pull latency and bandwidth away.
  const double alpha = 30e-6, beta = 8e-9, kappa = 2.0, slice = 4e-3;
  const int64_t segment = AllReducePerfModel::kPipelineSegmentBytes;  // comm's pipelined schedules
  const int64_t n = 25'600'000;
  auto truth = [&](const std::string& family, const std::string& codec, int64_t values) {
    if (family == "mpi_allreduce") {
      const AlgorithmCost m = algorithmCost(family, 4, values, 4.0);
      return 2 * alpha * m.messages + 1.5 * beta * m.bytes;
    }
    const AlgorithmCost c = algorithmCost(family, 4, values, kBytes.at(codec), segment);
    return alpha * c.messages + beta * c.bytes + kappa * c.codecSeconds(kRates.at(codec));
  };
  const std::vector<std::pair<std::string, std::string>> kinds{
      {"native", "fp32"}, {"two_shot", "e4m3"}, {"mpi_allreduce", "fp32"}};
  std::mt19937 random(7);
  std::uniform_real_distribution<double> phase(-0.5, 0.5);
  std::normal_distribution<double> drift(0.0, 0.03);
  double weightedError = 0.0, relativeError = 0.0, resolution = 0.0;
  constexpr int kCalibrations = 200;
  for (int draw = 0; draw < kCalibrations; ++draw) {
    std::string jsonl;
    for (int64_t values : {int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 22, int64_t{1} << 24, int64_t{10} << 22})
      for (const auto& [family, codec] : kinds) {
        const double t = truth(family, codec, values) * (1.0 + drift(random));
        const double measured = std::max(1.0, std::round(t / slice + phase(random))) * slice;
        const double bytes = family == "mpi_allreduce" ? 0.0 : algorithmCost(family, 4, values, kBytes.at(codec)).bytes;
        jsonl += record(family, codec, 4, values, measured, bytes, family == "mpi_allreduce" ? 0 : segment);
      }
    const auto records = parseBenchJsonLines(jsonl);
    AllReducePerfModel weighted, relative;
    weighted.fit(records, kBytes, kRates, kappa);
    relative.fit(records, kBytes, kRates, kappa, TimingNoise{1e-9, 1.0});
    resolution = std::max(resolution, weighted.timeResolution());
    for (const auto& [family, codec] : kinds) {
      const double expected = truth(family, codec, n);
      weightedError += std::fabs(weighted.predict({family, codec}, 4, n, kBytes.at(codec)) / expected - 1.0);
      relativeError += std::fabs(relative.predict({family, codec}, 4, n, kBytes.at(codec)) / expected - 1.0);
    }
  }
  weightedError /= 3 * kCalibrations;
  relativeError /= 3 * kCalibrations;
  std::printf("mean |error| at %lld values: weighted %.2f%%, relative %.2f%%\n", static_cast<long long>(n),
              100 * weightedError, 100 * relativeError);
  EXPECT_GE(resolution, slice) << "the fastest record takes at least a slice";
  EXPECT_LT(weightedError, 0.03);
  EXPECT_LT(weightedError, 0.5 * relativeError);
  AllReducePerfModel model;
  const auto records = parseBenchJsonLines(record("native", "fp32", 4, 1024, 1e-3, 6144));
  EXPECT_THROW(model.fit(records, kBytes, kRates, kappa, TimingNoise{-1.0, 0.05}), Error);
  EXPECT_THROW(model.fit(records, kBytes, kRates, kappa, TimingNoise{0.0, -0.05}), Error);
}

TEST(PerfModel, FitRefusesCalibrationsThatCannotPinTheTermsDown) {
  AllReducePerfModel model;
  // Large sizes only: latency and bandwidth cannot be told apart.
  const auto large = parseBenchJsonLines(apsRecords(20e-6, 0.5e-9, 2.0, {int64_t{1} << 22, int64_t{1} << 23}));
  EXPECT_THROW(model.fit(large, kBytes, kRates), Error);
  // MPI_Allreduce alike, on its own records.
  std::string mpi = apsRecords(20e-6, 0.5e-9, 2.0, {int64_t{1} << 10, int64_t{1} << 22});
  for (int64_t n : {int64_t{1} << 22, int64_t{1} << 23})
    mpi += record("mpi_allreduce", "fp32", 4, n, 1e-3 + 1e-9 * static_cast<double>(n), 0);
  EXPECT_THROW(model.fit(parseBenchJsonLines(mpi), kBytes, kRates), Error);
  // A codec without measured rates is named.
  try {
    model.fit(parseBenchJsonLines(apsRecords(20e-6, 0.5e-9, 2.0, {int64_t{1} << 10, int64_t{1} << 22})), kBytes,
              {{"fp32", kRates.at("fp32")}});
    FAIL() << "fit without e4m3's rates";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'e4m3'"), std::string::npos) << e.what();
  }
}

TEST(PerfModel, StepTimeHidesBucketsBehindBackwardExceptTheLast) {
  AllReducePerfModel model;
  // alpha 10 us, 1 GB/s, codec work at one core's speed; fit on exact synthetic records.
  model.fit(parseBenchJsonLines(apsRecords(10e-6, 1e-9, 1.0, {int64_t{1} << 12, int64_t{1} << 20, int64_t{1} << 24})),
            kBytes, kRates);
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

// A model with stated terms predicts what they say, and refuses what cannot be a network.
TEST(PerfModel, AStatedModelPredictsItsTerms) {
  const AllReducePerfModel::Key key{"two_shot", "e4m3"};
  const AllReducePerfModel m = AllReducePerfModel::stated(5e-6, 1e-9, kRates, {key});
  const AlgorithmCost c = algorithmCost("two_shot", 8, 1 << 16, 1.0, 0);
  EXPECT_NEAR(m.predict(key, 8, 1 << 16, 1.0, 0),
              5e-6 * c.messages + 1e-9 * c.bytes + c.codecSeconds(kRates.at("e4m3")), 1e-15);
  EXPECT_THROW(AllReducePerfModel::stated(5e-6, 0.0, kRates, {key}), Error);
  EXPECT_THROW(AllReducePerfModel::stated(5e-6, 1e-9, kRates, {{"two_shot", "e2m1"}}), Error);  // no rates
  EXPECT_THROW(AllReducePerfModel::stated(5e-6, 1e-9, kRates, {{"three_shot", "e4m3"}}), Error);
  // Weak scaling: never more than the ranks, exactly them with nothing to send.
  StepShape shape;
  shape.elements = 1 << 20;
  shape.forwardSeconds = 0.01;
  shape.backwardSeconds = 0.02;
  EXPECT_LT(dataParallelSpeedup(m, key, 8, 1.0, shape), 8.0);
  shape.elements = 0;
  EXPECT_DOUBLE_EQ(dataParallelSpeedup(m, key, 8, 1.0, shape), 8.0);
}

// Dettmers, arXiv:1511.04561v4, 5.1.3: his 4-GPU formula on his Tables 3 and 4 gives his printed
// speedups. The penalty terms he lists sum to 7.01 ms for 32-bit where he prints 6.81 ms; either
// gives 3.53x.
TEST(PerfModel, DettmersFourGpuNodeGivesHisSpeedups) {
  const DettmersNode nervana = dettmersAlexNetNode(104.1);
  EXPECT_NEAR(nervana.fcMs, 6.5, 1e-9);
  EXPECT_NEAR(nervana.parallelFcMs, 3.34, 1e-9);
  EXPECT_NEAR(dettmersFcPenaltyMs(nervana, 32), 7.01, 1e-9);
  EXPECT_NEAR(dettmersFcPenaltyMs(nervana, 8), 2.55, 1e-9);
  EXPECT_NEAR(dettmersNodeSpeedup(nervana, 32), 3.53, 0.005);
  EXPECT_NEAR(dettmersNodeSpeedup(nervana, 8), 3.67, 0.005);
  const DettmersNode convnet2 = dettmersAlexNetNode(177.0);
  EXPECT_NEAR(dettmersNodeSpeedup(convnet2, 32), 3.71, 0.005);
  EXPECT_NEAR(dettmersNodeSpeedup(convnet2, 8), 3.80, 0.005);
  EXPECT_THROW(dettmersFcPenaltyMs(nervana, 16), Error);
}

// 5.2: his cluster formulation on his Table 6 sync times reproduces every entry of his Table 7,
// among them the abstract's 23x (32-bit) and 50x (8-bit).
TEST(PerfModel, DettmersClusterReproducesHisTable7FromHisTable6) {
  struct Row {
    int64_t subBatch;
    double nervana32, nervana8, convnet32, convnet8;
  };
  const Row table7[] = {{128, 13.4, 13.8, 20.7, 21.4},  {256, 20.0, 24.4, 29.7, 35.2},  {512, 23.0, 39.3, 33.5, 51.9},
                        {1024, 14.8, 48.6, 22.7, 61.0}, {2048, 11.3, 50.6, 17.7, 62.8}, {12288, 1.3, 9.7, 2.15, 15.5}};
  const DettmersCluster nervana = dettmersAlexNetCluster(104.1, 96), convnet2 = dettmersAlexNetCluster(177.0, 96);
  ASSERT_EQ(nervana.nodes(), 32);
  ASSERT_EQ(nervana.globalBatch(), 12288);
  double best32 = 0.0, best8 = 0.0;
  for (const Row& r : table7) {
    const auto t6 = std::find_if(dettmersTable6().begin(), dettmersTable6().end(),
                                 [&](const DettmersTabulatedSync& t) { return t.subBatch == r.subBatch; });
    ASSERT_NE(t6, dettmersTable6().end());
    // Within 0.35%, or 0.06x for the one-pass rows he prints to two digits (1.3x for 1.28x; 9.7x
    // for 9.75x).
    const auto tolerance = [](double printed) { return std::max(0.0035 * printed, 0.06); };
    const double n32 = dettmersClusterStep(nervana, r.subBatch, t6->ms32).speedup;
    const double n8 = dettmersClusterStep(nervana, r.subBatch, t6->ms8).speedup;
    EXPECT_NEAR(n32, r.nervana32, tolerance(r.nervana32)) << r.subBatch;
    EXPECT_NEAR(n8, r.nervana8, tolerance(r.nervana8)) << r.subBatch;
    EXPECT_NEAR(dettmersClusterStep(convnet2, r.subBatch, t6->ms32).speedup, r.convnet32, tolerance(r.convnet32))
        << r.subBatch;
    EXPECT_NEAR(dettmersClusterStep(convnet2, r.subBatch, t6->ms8).speedup, r.convnet8, tolerance(r.convnet8))
        << r.subBatch;
    best32 = std::max(best32, n32);
    best8 = std::max(best8, n8);
  }
  // The abstract: 50x and more for 8-bit against 23x for 32-bit on 96 GPUs.
  EXPECT_NEAR(best32, 23.0, 0.1);
  EXPECT_NEAR(best8, 50.6, 0.1);
}

// The traffic behind his tables: 144 KiB per message for a 128 sub-batch in 32-bit (Table 5),
// 108 KiB for conv 384->256's gradient share. An 8-bit value is a quarter of a 32-bit one, where
// Table 5 lists an eighth.
TEST(PerfModel, DettmersTrafficMatchesHisMessageSizes) {
  const DettmersCluster c = dettmersAlexNetCluster(104.1, 96);
  EXPECT_DOUBLE_EQ(dettmersActivationMessageBytes(c, 128, 4.0), 144.0 * 1024);
  EXPECT_DOUBLE_EQ(dettmersActivationMessageBytes(c, 128, 1.0), 36.0 * 1024);
  EXPECT_DOUBLE_EQ(dettmersActivationMessageBytes(c, 12288, 4.0), 13824.0 * 1024);
  EXPECT_DOUBLE_EQ(dettmersAlexNetLayers()[3].weights * 4.0 / c.nodes(), 108.0 * 1024);
  // The latency curve passes through Table 5's points and interpolates between them.
  EXPECT_DOUBLE_EQ(dettmersLatencyMs(c, 144.0 * 1024), 0.035);
  EXPECT_DOUBLE_EQ(dettmersLatencyMs(c, 1.0 * 1024), 0.006);
  EXPECT_NEAR(dettmersLatencyMs(c, 36.0 * 1024), 0.0115, 1e-12);
  // One pass's sync from the traffic: 2 PCIe messages of 48 KiB at 5 GB/s and 31 InfiniBand
  // messages of 144 KiB at 6 GB/s, 0.035 ms latency each.
  EXPECT_NEAR(dettmersSyncFromTrafficMs(c, 128, 4.0), 2 * 49152 / 5e6 + 31 * (0.035 + 147456 / 6e6), 1e-12);
  // Table 6's 32-bit sync lies within 25% of the traffic's up to 1024 (the 2048 and 12288 rows
  // are his own estimates, marked "(?)" in part).
  for (const DettmersTabulatedSync& t : dettmersTable6()) {
    if (t.subBatch > 1024) continue;
    EXPECT_NEAR(dettmersSyncFromTrafficMs(c, t.subBatch, 4.0) / t.ms32, 1.0, 0.25) << t.subBatch;
  }
}

// Limits that hold for any cluster size: 8 bits never slower than 32, the speedup never above the
// GPUs, the sync growing with the sub-batch; one pass of the whole batch is the slowest schedule
// that sends nothing twice.
TEST(PerfModel, DettmersClusterLimits) {
  for (int gpus : {6, 12, 24, 48, 96, 192, 384}) {
    const DettmersCluster c = dettmersAlexNetCluster(104.1, gpus);
    double lastSync32 = 0.0;
    for (int64_t s = 1; s <= c.globalBatch(); s *= 2) {
      const double sync32 = dettmersSyncFromTrafficMs(c, s, 4.0), sync8 = dettmersSyncFromTrafficMs(c, s, 1.0);
      EXPECT_LT(sync8, sync32);
      EXPECT_GT(sync32, lastSync32);
      lastSync32 = sync32;
      const double x32 = dettmersClusterStep(c, s, sync32).speedup, x8 = dettmersClusterStep(c, s, sync8).speedup;
      EXPECT_GE(x8, x32) << gpus << " GPUs, sub-batch " << s;
      EXPECT_GT(x32, 0.0);
      EXPECT_LE(x8, gpus) << gpus << " GPUs, sub-batch " << s;
    }
    // Nothing to send: N T / T at one pass, the fc layers' share repeated otherwise.
    EXPECT_DOUBLE_EQ(dettmersClusterStep(c, c.globalBatch(), 0.0).speedup, gpus);
    EXPECT_LT(dettmersClusterStep(c, c.globalBatch() / 2, 0.0).speedup, gpus);
  }
  // Bad settings are refused with the value named.
  const DettmersCluster c = dettmersAlexNetCluster(104.1, 96);
  EXPECT_THROW(dettmersClusterStep(c, 0, 1.0), Error);
  EXPECT_THROW(dettmersClusterStep(c, 12289, 1.0), Error);
  EXPECT_THROW(dettmersClusterStep(c, 128, -1.0), Error);
  EXPECT_THROW(checkDettmersCluster(dettmersAlexNetCluster(104.1, 97), 128), Error);
  EXPECT_THROW(checkDettmersCluster(dettmersAlexNetCluster(104.1, 3), 128), Error);  // one node
  try {
    dettmersClusterStep(c, 20000, 1.0);
    FAIL() << "a sub-batch above the global batch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("20000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace aps::perfmodel
