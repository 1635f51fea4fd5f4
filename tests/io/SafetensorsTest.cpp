#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"
#include "framework/tensor/HalfFloat.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace {

using aps::DType;
using aps::Tensor;
namespace io = aps::io;
namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aps_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Writes raw bytes: an 8-byte length (of `header` unless given) + header + data.
  std::string writeRaw(const std::string& name, const std::string& header, const std::string& data = "",
                       int64_t declaredLength = -1) const {
    const std::string path = file(name);
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = declaredLength >= 0 ? static_cast<uint64_t>(declaredLength) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return path;
  }

  // The error message of loading `path`, which must name the file.
  static std::string loadError(const std::string& path) {
    try {
      io::loadSafetensors(path);
    } catch (const aps::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "no error for " << path;
    return "";
  }

  fs::path dir_;
};

TEST_F(Safetensors, RoundTripIsBitExactForEveryDtype) {
  aps::Rng rng(1);
  Tensor f32 = Tensor::randn({3, 4}, rng);
  f32.setValue({0, 0}, std::nan(""));
  f32.setValue({0, 1}, -0.0);
  f32.setValue({0, 2}, 1e-40);  // subnormal
  std::vector<int64_t> i64{std::numeric_limits<int64_t>::min(), 0, std::numeric_limits<int64_t>::max()};
  std::vector<int32_t> i32{-5, 7};
  std::vector<uint8_t> u8{0, 1, 255};
  aps::NamedTensors tensors{{"z.weight", f32},
                            {"a.half", f32.to(DType::Float16)},
                            {"m.bf16", f32.to(DType::BFloat16)},
                            {"ints", Tensor::fromVector(i64, {3})},
                            {"i32", Tensor::fromVector(i32, {2, 1})},
                            {"bytes", Tensor::fromVector(u8, {3})},
                            {"scalar", Tensor::scalar(2.5f)},
                            {"empty", Tensor::zeros({0, 3})},
                            {"view", f32.transpose(0, 1)}};  // non-contiguous: written in logical order
  const std::string path = file("model.safetensors");
  io::saveSafetensors(path, tensors, {{"format", "pt"}, {"step", "42"}});
  const auto loaded = io::loadSafetensors(path);
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& a = tensors[i].tensor;
    const Tensor& b = loaded.tensors[i].tensor;
    EXPECT_EQ(loaded.tensors[i].name, tensors[i].name);  // order kept
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(b.sizes(), a.sizes());
    const Tensor ac = a.contiguous();
    if (ac.numel() > 0) {  // an empty tensor has no storage to compare
      EXPECT_EQ(std::memcmp(ac.rawData(), b.rawData(), ac.buffer().bytes()), 0) << tensors[i].name;
    }
  }
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "42"}}));
  // Header length is a multiple of 8 (data aligned) and no temporary file is left behind.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(Safetensors, OverwritesAtomicallyAndRejectsBadInput) {
  const std::string path = file("ckpt.safetensors");
  io::saveSafetensors(path, {{"a", Tensor::ones({2})}});
  io::saveSafetensors(path, {{"b", Tensor::zeros({3})}});
  EXPECT_EQ(io::loadSafetensors(path).tensors.at(0).name, "b");
  EXPECT_ERROR_NAMES(io::saveSafetensors(path, {{"a", Tensor::ones({1})}, {"a", Tensor::ones({1})}}),
                     "tensor name 'a' appears twice");
  EXPECT_ERROR_NAMES(io::saveSafetensors(path, {{"__metadata__", Tensor::ones({1})}}),
                     "invalid tensor name '__metadata__'");
  EXPECT_ERROR_NAMES(io::saveSafetensors(file("missing_dir/x.safetensors"), {{"a", Tensor::ones({1})}}),
                     "missing_dir/x.safetensors");
  EXPECT_EQ(io::loadSafetensors(path).tensors.at(0).name, "b");  // the failed writes left it alone
}

TEST_F(Safetensors, ReadsAFileWrittenByPythonWithTorchConversions) {
  const auto loaded = io::loadSafetensors(std::string(APS_SOURCE_DIR) + "/tests/fixtures/io/torch_tensors.safetensors");
  std::map<std::string, Tensor> byName;
  for (const auto& t : loaded.tensors) byName[t.name] = t.tensor;
  ASSERT_EQ(byName.size(), 6u);
  EXPECT_EQ(loaded.metadata.at("format"), "pt");
  const Tensor f32 = byName.at("f32");
  EXPECT_EQ(f32.sizes(), (aps::Shape{2, 3}));
  // Our float16/bfloat16 conversions give the same bits as PyTorch's.
  EXPECT_EQ(f32.to(DType::Float16).toVector<uint16_t>(), byName.at("f16").toVector<uint16_t>());
  EXPECT_EQ(f32.to(DType::BFloat16).toVector<uint16_t>(), byName.at("bf16").toVector<uint16_t>());
  EXPECT_EQ(byName.at("i64").toVector<int64_t>(), (std::vector<int64_t>{-(int64_t{1} << 62), 5}));
  EXPECT_EQ(byName.at("i32").toVector<int32_t>(), (std::vector<int32_t>{-7, 0, 2147483647}));
  EXPECT_EQ(byName.at("u8").toVector<uint8_t>(), (std::vector<uint8_t>{0, 255, 17, 3}));
}

TEST_F(Safetensors, RejectsMalformedFilesWithAClearError) {
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  EXPECT_NO_THROW(io::loadSafetensors(writeRaw("good", ok, eight)));

  {
    const std::string path = file("short");
    std::ofstream(path, std::ios::binary) << "abc";
    EXPECT_NE(loadError(path).find("truncated"), std::string::npos);
  }
  EXPECT_NE(loadError(writeRaw("long_header", ok, eight, 1000)).find("truncated"), std::string::npos);
  EXPECT_NE(loadError(writeRaw("huge_header", ok, eight, int64_t{1} << 40)).find("exceeds"), std::string::npos);
  EXPECT_NE(loadError(writeRaw("bad_json", "{\"t\": [", eight)).find("malformed JSON"), std::string::npos);
  EXPECT_NE(loadError(writeRaw("not_object", "[1, 2]", eight)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(loadError(writeRaw("f64", R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", eight))
                .find("unsupported dtype 'F64'"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("out_of_range", R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight))
                .find("outside the 8-byte data section"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("size_mismatch", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", eight))
                .find("needs 4 bytes"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("reversed", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", eight))
                .find("outside"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                             "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               eight))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("negative", R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight))
                .find("shape entry"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("giant_shape",
                               R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight))
                .find("larger than the file"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("no_offsets", R"({"t":{"dtype":"F32","shape":[2]}})", eight)).find("data_offsets"),
            std::string::npos);
  EXPECT_NE(loadError(writeRaw("bad_meta", R"({"__metadata__":{"k":1}})")).find("metadata 'k'"), std::string::npos);
  EXPECT_NE(loadError(file("does_not_exist")).find("cannot open"), std::string::npos);
}

TEST(SafetensorsDescribe, ListsTensorsWithStatistics) {
  io::SafetensorsContents contents;
  contents.metadata["format"] = "pt";
  contents.tensors.push_back({"fc.weight", Tensor::fromVector({1.0f, -3.0f, NAN, 5.0f}, {2, 2})});
  std::vector<int64_t> steps{7};
  contents.tensors.push_back({"step", Tensor::fromVector(steps, {})});
  const std::string text = io::describeSafetensors(contents);
  EXPECT_NE(text.find("metadata format = pt"), std::string::npos) << text;
  EXPECT_NE(text.find("fc.weight F32 [2, 2] 16 bytes min -3 max 5 mean 1 non-finite 1"), std::string::npos) << text;
  EXPECT_NE(text.find("step I64 [] 8 bytes\n"), std::string::npos) << text;
  EXPECT_NE(text.find("2 tensors, 24 bytes"), std::string::npos) << text;
}

TEST(SafetensorsDType, NamesRoundTrip) {
  for (auto t : {DType::Float32, DType::Float16, DType::BFloat16, DType::UInt8, DType::Int32, DType::Int64}) {
    EXPECT_EQ(io::parseSafetensorsDType(io::safetensorsDType(t)), t);
  }
  EXPECT_ERROR_NAMES(io::parseSafetensorsDType("BOOL"), "'BOOL'");
}

}  // namespace
