#include "gpulab/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gpulab {
namespace {

TEST(Shape, SymbolicBatch) {
  Shape s{Shape::kBatch, 3, 224, 224};
  EXPECT_TRUE(s.has_batch());
  EXPECT_EQ(s.to_string(), "[N,3,224,224]");
  EXPECT_EQ(s.numel(2), 2 * 3 * 224 * 224);
  EXPECT_EQ(s.bind_batch(8), (Shape{8, 3, 224, 224}));
  EXPECT_FALSE(s.bind_batch(8).has_batch());
}

TEST(Tensor, FromBytesChecksSize) {
  std::vector<std::byte> bytes(12);
  EXPECT_TRUE(Tensor::from_bytes(DataType::kFloat32, Shape{3}, bytes).is_ok());
  auto bad = Tensor::from_bytes(DataType::kFloat32, Shape{4}, bytes);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidFile);
}

// An ONNX initializer may have a zero dimension (fuzz_onnx_import: a float16 weight of shape
// [2,0,1,1]); building it must not hand memcpy the null pointers of empty storage.
TEST(Tensor, EmptyTensorsFromValues) {
  std::vector<float> no_floats;
  Tensor f = Tensor::from_floats(Shape{2, 0, 1, 1}, no_floats);
  EXPECT_EQ(f.numel(), 0);
  EXPECT_EQ(f.size_bytes(), 0u);
  std::vector<int64_t> no_ints;
  Tensor i = Tensor::from_int64s(Shape{0}, no_ints);
  EXPECT_EQ(i.numel(), 0);
  EXPECT_EQ(i.dtype(), DataType::kInt64);
}

TEST(Tensor, ReshapeKeepsData) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_floats(Shape{2, 3}, v);
  auto r = t.reshaped(Shape{3, 2});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->f32()[5], 6.0f);
  EXPECT_FALSE(t.reshaped(Shape{4}).is_ok());
}

TEST(Tensor, DtypeNamesRoundTrip) {
  for (DataType d :
       {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8, DataType::kInt64}) {
    auto parsed = parse_dtype(dtype_name(d));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(parse_dtype("float33").is_ok());
}

TEST(Compare, NormsAndNonFinite) {
  std::vector<float> ref{1, 2, 2};
  std::vector<float> same{1, 2, 2};
  EXPECT_EQ(compare(same, ref).rel_l2, 0.0);
  std::vector<float> off{1, 2, 3};
  auto e = compare(off, ref);
  EXPECT_NEAR(e.rel_l2, 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(e.max_abs, 1.0, 1e-12);
  std::vector<float> nan{1, std::nanf(""), 2};
  EXPECT_EQ(compare(nan, ref).non_finite, 1);
  EXPECT_TRUE(std::isinf(compare(nan, ref).rel_l2));
}

}  // namespace
}  // namespace gpulab
