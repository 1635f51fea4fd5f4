// Quantizes a few values to FP8 E4M3 (round to nearest, ties to even), then sums them over two
// simulated ranks with E4M3 on the wire: aps used as a library (examples/cpp_embed/CMakeLists.txt).
#include <aps/comm/AllReduceAlgorithm.h>
#include <aps/comm/SimTransport.h>
#include <aps/precision/CodecSpec.h>
#include <aps/precision/FloatFormat.h>
#include <aps/precision/Quantizer.h>

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  using namespace aps;
  const precision::Quantizer e4m3(precision::FloatFormat::preset("e4m3"));
  const std::vector<float> values{0.3f, 1.1f, 100.0f, 0.01f, -2.75f, 1.1875f};  // 100, 1.1875: ties
  std::vector<float> quantized(values.size());
  e4m3.quantize(values.data(), quantized.data(), static_cast<int64_t>(values.size()),
                precision::RoundingMode::NearestEven);
  for (size_t i = 0; i < values.size(); ++i) {
    std::printf("e4m3(%g) = %.9g (code 0x%02x)\n", static_cast<double>(values[i]), static_cast<double>(quantized[i]),
                static_cast<unsigned>(e4m3.encode(values[i])));
  }

  // Two simulated ranks holding the quantized values; two_shot all-reduce with E4M3 on the wire.
  comm::SimTransport world(2);
  std::vector<std::vector<float>> ranks(2, quantized);
  std::vector<float*> buffers{ranks[0].data(), ranks[1].data()};
  const auto allReduce = comm::makeAllReduce({.kind = comm::AllReduceKind::TwoShot}, precision::makeCodec("e4m3"));
  allReduce->run(world, buffers, static_cast<int64_t>(quantized.size()));
  std::printf("sum over 2 ranks:");
  for (float v : ranks[0]) std::printf(" %.9g", static_cast<double>(v));
  std::printf("\n");
  return 0;
}
