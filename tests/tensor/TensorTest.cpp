#include "framework/core/Error.h"
#include "framework/tensor/CpuAllocator.h"
#include "framework/tensor/HalfFloat.h"
#include "framework/tensor/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>

namespace {

using aps::DType;
using aps::Tensor;

Tensor arange(int64_t n, const aps::Shape& shape) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::fromVector(v, shape);
}

TEST(Tensor, FactoriesFillShapesAndDtypes) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.sizes(), (aps::Shape{2, 3}));
  EXPECT_EQ(z.strides(), (aps::Shape{3, 1}));
  EXPECT_EQ(z.numel(), 6);
  for (float v : z.toFloatVector()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({4}, 2.5, DType::Int32);
  EXPECT_EQ(f.toVector<int32_t>(), (std::vector<int32_t>{2, 2, 2, 2}));
  EXPECT_EQ(Tensor::ones({3}, DType::BFloat16).toFloatVector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(Tensor::scalar(3.0f).dim(), 0);
  EXPECT_EQ(Tensor::scalar(3.0f).item(), 3.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Tensor::empty({7}).rawData()) % aps::Storage::kAlignment, 0u);
}

TEST(CpuAllocator, ReusesFreedBlocksOfTheSameSize) {
  auto& allocator = aps::CpuAllocator::instance();
  allocator.emptyCache();
  const void* first = nullptr;
  {
    Tensor big = Tensor::zeros({1 << 18});
    first = big.rawData();
  }
  EXPECT_EQ(allocator.cachedBytes(), size_t{1} << 20);
  Tensor again = Tensor::zeros({1 << 18});
  EXPECT_EQ(again.rawData(), first);                         // the cached block came back...
  for (float v : again.toFloatVector()) ASSERT_EQ(v, 0.0f);  // ...and zeros() cleared it
  EXPECT_EQ(allocator.cachedBytes(), 0u);
  allocator.setCacheLimit(0);
  { Tensor other = Tensor::empty({1 << 18}); }
  EXPECT_EQ(allocator.cachedBytes(), 0u);  // over the limit: freed, not cached
  allocator.setCacheLimit(size_t{4} << 30);
}

// Blocks under kMinCachedBytes are kept by the thread that frees them: it gets them back,
// another thread does not see them, and a cache limit of 0 keeps none.
TEST(CpuAllocator, ReusesSmallBlocksOnTheThreadThatFreedThem) {
  auto& allocator = aps::CpuAllocator::instance();
  allocator.emptyCache();
  void* block = allocator.allocate(1000);
  allocator.release(block, 1000);
  EXPECT_EQ(allocator.cachedBytes(), 1024u);  // rounded up to the alignment
  void* again = allocator.allocate(1000);
  EXPECT_EQ(again, block);
  EXPECT_EQ(allocator.cachedBytes(), 0u);
  allocator.release(again, 1000);
  size_t seenElsewhere = 1;
  void* elsewhere = nullptr;
  std::thread([&] {
    seenElsewhere = allocator.cachedBytes();
    elsewhere = allocator.allocate(1000);
    allocator.release(elsewhere, 1000);
  }).join();
  EXPECT_EQ(seenElsewhere, 0u);
  EXPECT_NE(elsewhere, block);  // this thread's block stayed in this thread's cache
  allocator.setCacheLimit(0);
  EXPECT_EQ(allocator.cachedBytes(), 0u);
  allocator.release(allocator.allocate(1000), 1000);
  EXPECT_EQ(allocator.cachedBytes(), 0u);  // over the limit: freed, not cached
  allocator.setCacheLimit(size_t{4} << 30);
}

TEST(Tensor, RandomFactoriesAreReproducibleFromTheRng) {
  aps::Rng a(7), b(7);
  EXPECT_EQ(Tensor::randn({100}, a).toFloatVector(), Tensor::randn({100}, b).toFloatVector());
  Tensor u = Tensor::uniform({1000}, a, -2.0f, 3.0f);
  double mean = 0;
  for (float v : u.toFloatVector()) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 3.0f);
    mean += v / 1000.0;
  }
  EXPECT_NEAR(mean, 0.5, 0.2);
}

TEST(Tensor, ViewsShareStorageAndHaveTheRightStrides) {
  Tensor t = arange(24, {2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (aps::Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (aps::Shape{1, 12, 4}));
  EXPECT_TRUE(p.sharesStorage(t));
  EXPECT_FALSE(p.isContiguous());
  EXPECT_EQ(p.value({3, 1, 2}), t.value({1, 2, 3}));

  Tensor n = t.narrow(2, 1, 2);
  EXPECT_EQ(n.sizes(), (aps::Shape{2, 3, 2}));
  EXPECT_EQ(n.storageOffset(), 1);
  EXPECT_EQ(n.value({1, 2, 1}), 1 * 12 + 2 * 4 + 2);
  n.setValue({0, 0, 0}, -5.0);
  EXPECT_EQ(t.value({0, 0, 1}), -5.0);  // writes go through to the shared storage

  Tensor s = t.slice(1, 0, 3, 2);
  EXPECT_EQ(s.sizes(), (aps::Shape{2, 2, 4}));
  EXPECT_EQ(s.value({1, 1, 3}), 12 + 8 + 3);
  EXPECT_EQ(t.select(0, 1).sizes(), (aps::Shape{3, 4}));
  EXPECT_EQ(t.select(0, 1).value({0, 0}), 12.0);

  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.sizes(), (aps::Shape{6, 4}));
  EXPECT_TRUE(v.sharesStorage(t));
  EXPECT_THROW(p.view({24}), aps::Error);
  Tensor r = p.reshape({24});  // not contiguous: copies in logical order
  EXPECT_FALSE(r.sharesStorage(t));
  EXPECT_EQ(r.value({1}), 4.0);  // p[0][0][1] = t[0][1][0]
  EXPECT_EQ(t.flatten(1).sizes(), (aps::Shape{2, 12}));
  EXPECT_EQ(t.transpose(0, 2).sizes(), (aps::Shape{4, 3, 2}));

  // Contiguous: strides those of the sizes, from the last dimension; a dimension of size 1
  // may have any stride.
  EXPECT_TRUE(t.isContiguous());
  EXPECT_FALSE(n.isContiguous());
  EXPECT_FALSE(s.isContiguous());
  EXPECT_TRUE(t.select(0, 1).isContiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).isContiguous());
  EXPECT_TRUE(t.select(0, 1).narrow(0, 1, 1).isContiguous());
  EXPECT_FALSE(t.narrow(1, 1, 1).isContiguous());  // rows of 4 values 12 apart
  EXPECT_TRUE(arange(4, {4, 1}).transpose(0, 1).isContiguous());
  EXPECT_FALSE(arange(8, {4, 2}).transpose(0, 1).isContiguous());
}

TEST(Tensor, ContiguousCopiesInLogicalOrder) {
  Tensor t = arange(6, {2, 3});
  Tensor c = t.transpose(0, 1).contiguous();
  EXPECT_TRUE(c.isContiguous());
  EXPECT_EQ(c.toFloatVector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(t.contiguous().sameAs(t));
  Tensor k = t.clone();
  k.setValue({0, 0}, 9);
  EXPECT_EQ(t.value({0, 0}), 0.0);
}

TEST(Tensor, DtypeConversionsRoundTrip) {
  Tensor t = Tensor::fromVector({1.0f, -2.5f, 65504.0f, 1e-8f}, {4});
  EXPECT_EQ(t.to(DType::Float16).to(DType::Float32).toFloatVector(), (std::vector<float>{1.0f, -2.5f, 65504.0f, 0.0f}));
  EXPECT_EQ(t.to(DType::Int64).toVector<int64_t>(), (std::vector<int64_t>{1, -2, 65504, 0}));
  std::vector<int64_t> big{int64_t{1} << 60, -3};
  EXPECT_EQ(Tensor::fromVector(big, {2}).transpose(0, 0).clone().toVector<int64_t>(), big);
  EXPECT_EQ(aps::halfBitsToFloat(aps::floatToHalfBits(0x1.0p-24f)), 0x1.0p-24f);  // smallest subnormal
  EXPECT_EQ(aps::floatToHalfBits(65520.0f), 0x7C00u);                             // rounds to inf
  EXPECT_EQ(aps::floatToHalfBits(1.0f + 0x1.0p-11f), 0x3C00u);                    // tie to even
  EXPECT_EQ(aps::floatToBFloat16Bits(1.0f + 0x1.0p-8f), 0x3F80u);                 // tie to even
  EXPECT_EQ(aps::floatToBFloat16Bits(1.0f + 0x1.8p-8f), 0x3F81u);
  EXPECT_TRUE(std::isnan(aps::bfloat16BitsToFloat(aps::floatToBFloat16Bits(NAN))));
}

TEST(Tensor, BufferExposesContiguousElements) {
  Tensor t = arange(6, {2, 3});
  aps::BufferView b = t.narrow(0, 1, 1).buffer();
  EXPECT_EQ(b.count, 3);
  EXPECT_EQ(b.as<float>()[0], 3.0f);
  EXPECT_EQ(b.bytes(), 12u);
  EXPECT_THROW(t.transpose(0, 1).buffer(), aps::Error);
}

TEST(Tensor, ErrorsNameShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    t.copyFrom(Tensor::zeros({3, 2}));
    FAIL();
  } catch (const aps::Error& e) {
    EXPECT_NE(std::string(e.what()).find("shapes [3, 2] and [2, 3] do not match"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.view({4, -1}), aps::Error);
  EXPECT_THROW(t.narrow(1, 2, 2), aps::Error);
  EXPECT_THROW(t.permute({0, 0}), aps::Error);
  EXPECT_THROW(t.value({2, 0}), aps::Error);
  EXPECT_THROW(t.data<int64_t>(), aps::Error);
  EXPECT_THROW(Tensor::fromVector({1.0f, 2.0f}, {3}), aps::Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::Int64).setRequiresGrad(), aps::Error);
  EXPECT_THROW(Tensor().numel(), aps::Error);
}

}  // namespace
