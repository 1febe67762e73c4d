// The shared argument checks of the optional ops that the CPU backend does not implement (so
// that CI, which has no GPU, exercises them): LinearPlanes' planes.
#include "engine/runtime/op_checks.h"

#include <vector>

#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"

namespace waav::checks {
namespace {

class OpChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = CreateBackend("cpu", {.num_threads = 1});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  Tensor Make(const Shape& shape, DType dtype = DType::kF32) {
    return backend_->Allocate(shape, dtype).value();
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(OpChecksTest, LinearPlanesTakesSeparateOrStackedPlanes) {
  const Tensor x = Make({2, 5, 8}), weight = Make({12, 8}, DType::kF16), bias = Make({12});
  const Tensor stacked = Make({3, 10, 4});
  const std::vector<Tensor> views = {*stacked.Slice(0, 1), *stacked.Slice(1, 2),
                                     *stacked.Slice(2, 3)};
  auto dims = ValidateLinearPlanes(DeviceKind::kCpu, x, weight, &bias, views);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->m, 10);
  EXPECT_EQ(dims->n, 12);
  EXPECT_EQ(dims->k, 8);
  // Separate allocations of any shape with C last and M·C elements (a cache [B, T, C]).
  const std::vector<Tensor> separate = {Make({2, 5, 4}), Make({10, 4}), Make({1, 10, 4})};
  EXPECT_TRUE(ValidateLinearPlanes(DeviceKind::kCpu, x, weight, nullptr, separate).ok());
}

TEST_F(OpChecksTest, LinearPlanesRefusesBadPlanes) {
  const Tensor x = Make({10, 8}), weight = Make({12, 8}), bias = Make({12});
  const Tensor a = Make({10, 4}), b = Make({10, 4}), c = Make({10, 4});
  const auto invalid = [&](std::vector<Tensor> planes, const Tensor* with_bias = nullptr,
                           bool half = false) {
    const absl::Status status =
        ValidateLinearPlanes(DeviceKind::kCpu, x, weight, with_bias, planes, half).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("LinearPlanes"), std::string::npos) << status;
  };
  invalid({});                                                 // no plane
  invalid({a, b});                                             // 2 planes of 6, not 4
  invalid({a, b, c, Make({10, 3}), Make({10, 3})});            // 5 does not divide 12
  invalid({a, b, Make({10, 5})});                              // wrong C
  invalid({a, b, Make({9, 4})});                               // wrong M
  invalid({a, b, Make({10, 4}, DType::kF16)}, nullptr, true);  // mixed dtypes
  invalid({a, b, Make({10, 4}, DType::kF16)});                 // f16 without f16 activations
  invalid({a, b, Make({10, 4}, DType::kI32)});                 // not a float type
  invalid({a, b, b});                                          // planes overlap
  invalid({a, b, *x.Reshape({20, 4})});                        // a plane overlaps x
  invalid({a, b, Tensor()});                                   // undefined
  invalid({a, b, c}, &a);                                      // bias overlaps a plane
  const Tensor short_bias = Make({4});
  invalid({a, b, c}, &short_bias);  // one bias per output
  const Tensor w17 = Make({17, 8});
  std::vector<Tensor> many;
  for (int p = 0; p < Backend::kMaxLinearPlanes + 1; ++p) many.push_back(Make({10, 1}));
  const absl::Status status =
      ValidateLinearPlanes(DeviceKind::kCpu, x, w17, nullptr, many).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(ValidateLinearPlanes(DeviceKind::kCpu, x, weight, &bias, {a, b, c}).ok());
  // Tensors of another device.
  EXPECT_EQ(ValidateLinearPlanes(DeviceKind::kCuda, x, weight, &bias, {a, b, c}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(OpChecksTest, LinearPlanesAppendTakesCachesAfterDensePlanes) {
  // A decoder step of 3 rows: Q [3, 1, 4], K and V caches [3, 6, 4].
  const Tensor x = Make({3, 1, 8}), weight = Make({12, 8}, DType::kF16), bias = Make({12});
  const Tensor q = Make({3, 1, 4}), k = Make({3, 6, 4}), v = Make({3, 6, 4});
  const Tensor positions = Make({3}, DType::kI32);
  auto dims =
      ValidateLinearPlanesAppend(DeviceKind::kCpu, x, weight, &bias, {q, k, v}, 1, positions);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->linear.m, 3);
  EXPECT_EQ(dims->linear.n, 12);
  EXPECT_EQ(dims->capacity, 6);
  // Nothing appended: LinearPlanes' planes (capacity 0).
  dims = ValidateLinearPlanesAppend(DeviceKind::kCpu, x, weight, &bias,
                                    {q, Make({3, 4}), Make({3, 4})}, 3, positions);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->capacity, 0);
  // Row views of a larger batch's caches (a decoder state's Rows) are caches too.
  const Tensor big_k = Make({5, 6, 4}), big_v = Make({5, 6, 4});
  EXPECT_TRUE(ValidateLinearPlanesAppend(DeviceKind::kCpu, x, weight, nullptr,
                                         {q, *big_k.Slice(1, 4), *big_v.Slice(2, 5)}, 1, positions)
                  .ok());
}

TEST_F(OpChecksTest, LinearPlanesAppendRefusesBadCachesAndPositions) {
  const Tensor x = Make({3, 8}), weight = Make({12, 8}), bias = Make({12});
  const Tensor q = Make({3, 4}), k = Make({3, 6, 4}), v = Make({3, 6, 4});
  const Tensor positions = Make({3}, DType::kI32);
  const auto invalid = [&](std::vector<Tensor> planes, int first, const Tensor& where,
                           const Tensor* with_bias = nullptr) {
    const absl::Status status =
        ValidateLinearPlanesAppend(DeviceKind::kCpu, x, weight, with_bias, planes, first, where)
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("LinearPlanes"), std::string::npos) << status;
  };
  invalid({q, k, v}, -1, positions);                            // first_appended < 0
  invalid({q, k, v}, 4, positions);                             // beyond the planes
  invalid({q, k, Make({3, 5, 4})}, 1, positions);               // caches of two lengths
  invalid({q, k, Make({3, 0, 4})}, 1, positions);               // an empty cache
  invalid({q, k, Make({3, 24})}, 1, positions);                 // not a [M, L, C] cache
  invalid({q, k, Make({2, 6, 4})}, 1, positions);               // fewer batch rows than x
  invalid({q, k, Make({3, 6, 5})}, 1, positions);               // wrong C
  invalid({q, k, Make({3, 6, 4}, DType::kF16)}, 1, positions);  // f16 cache
  invalid({q, k, Make({3, 6, 4}, DType::kI32)}, 1, positions);  // not a float type
  invalid({q, k, k}, 1, positions);                             // caches overlap
  const Tensor shared = Make({4, 6, 4});
  invalid({q, *shared.Slice(0, 3), *shared.Slice(1, 4)}, 1, positions);  // row views overlapping
  invalid({q, k, Tensor()}, 1, positions);                               // undefined
  invalid({q, k, v}, 1, Make({2}, DType::kI32));                         // a position per row
  invalid({q, k, v}, 1, Make({3}));                                      // f32 positions
  invalid({q, k, v}, 1, Tensor());                                       // no positions
  invalid({q, k, v}, 1, positions, &k);                                  // bias [3, 6, 4]
  EXPECT_TRUE(
      ValidateLinearPlanesAppend(DeviceKind::kCpu, x, weight, &bias, {q, k, v}, 1, positions).ok());
  // Tensors of another device.
  EXPECT_EQ(ValidateLinearPlanesAppend(DeviceKind::kCuda, x, weight, &bias, {q, k, v}, 1, positions)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Attention's out: f32, or f16 (the result rounded for the GEMM that reads it) only with f16
// activations; never another type.
TEST_F(OpChecksTest, AttentionTakesAnF16OutOnlyWithHalfActivations) {
  const Tensor q = Make({2, 1, 8}), k = Make({2, 5, 8}), v = Make({2, 5, 8});
  const Tensor out32 = Make({2, 1, 8}), out16 = Make({2, 1, 8}, DType::kF16);
  auto check = [&](const Tensor& out, bool half_activations) {
    return ValidateAttention(DeviceKind::kCpu, q, k, v, nullptr, 2, 0.5f, out, half_activations)
        .status();
  };
  EXPECT_TRUE(check(out32, false).ok());
  EXPECT_TRUE(check(out32, true).ok());
  EXPECT_TRUE(check(out16, true).ok());
  EXPECT_EQ(check(out16, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check(Make({2, 1, 8}, DType::kI32), true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check(Make({2, 2, 8}, DType::kF16), true).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace waav::checks
