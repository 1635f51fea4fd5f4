#include "framework/core/Error.h"
#include "framework/tensor/Buffer.h"

#include <gtest/gtest.h>

namespace {

TEST(DType, SizesAndNamesRoundTrip) {
  EXPECT_EQ(aps::dtypeSize(aps::DType::Float32), 4u);
  EXPECT_EQ(aps::dtypeSize(aps::DType::BFloat16), 2u);
  EXPECT_EQ(aps::dtypeSize(aps::DType::Int64), 8u);
  for (auto t : {aps::DType::Float32, aps::DType::Float16, aps::DType::BFloat16, aps::DType::UInt8,
                 aps::DType::Int32, aps::DType::Int64}) {
    EXPECT_EQ(aps::parseDType(aps::dtypeName(t)), t);
  }
  EXPECT_THROW(aps::parseDType("float8"), aps::Error);
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(aps::parseDevice("cpu"), aps::Device::cpu());
  EXPECT_EQ(aps::parseDevice("cuda:2"), aps::Device::cuda(2));
  EXPECT_EQ(aps::deviceName(aps::Device::cuda(1)), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1"}) {
    try {
      aps::parseDevice(bad);
      FAIL() << bad;
    } catch (const aps::Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos);
    }
  }
}

TEST(BufferView, CountsBytes) {
  float values[6] = {};
  aps::BufferView view{values, 6, aps::DType::Float32};
  EXPECT_EQ(view.bytes(), 24u);
  EXPECT_EQ(view.as<float>(), values);
}

}  // namespace
