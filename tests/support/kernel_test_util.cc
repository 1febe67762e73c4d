#include "tests/support/kernel_test_util.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

#include "engine/runtime/dtype.h"

namespace waav::testing {

double GeluReference(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

SeededTest::SeededTest() : seed_(std::random_device{}()), rng_(seed_) {}

void SeededTest::TearDown() {
  if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
}

std::vector<float> SeededTest::Random(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng_);
  return v;
}

int SeededTest::RandomInt(int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng_);
}

Tensor KernelTest::F32(const Shape& shape, const std::vector<float>& values) {
  auto t = Upload(*backend_, shape, DType::kF32, values.data());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

Tensor KernelTest::I32(const Shape& shape, const std::vector<int32_t>& values) {
  auto t = Upload(*backend_, shape, DType::kI32, values.data());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

Tensor KernelTest::Weight(const Shape& shape, std::vector<float>& values, DType dtype) {
  if (dtype == DType::kF32) return F32(shape, values);
  std::vector<uint16_t> half(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    half[i] = FloatToHalf(values[i]);
    values[i] = HalfToFloat(half[i]);
  }
  auto t = Upload(*backend_, shape, DType::kF16, half.data());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

Tensor KernelTest::Poisoned(const Shape& shape) {
  return F32(shape, std::vector<float>(static_cast<size_t>(shape.numel()),
                                       std::numeric_limits<float>::quiet_NaN()));
}

std::vector<float> KernelTest::Read(const Tensor& t) {
  auto v = Download<float>(*backend_, t);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

namespace {

// ‖got − want‖ / denominator <= tolerance (the absolute error when the denominator is 0).
::testing::AssertionResult RelativeL2Within(const std::vector<float>& got,
                                            const std::vector<double>& want, double denominator,
                                            double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << got[i] << " (want " << want[i] << ")";
    }
    diff += (got[i] - want[i]) * (got[i] - want[i]);
  }
  const double rel = denominator > 0 ? std::sqrt(diff) / denominator : std::sqrt(diff);
  if (rel <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative L2 error " << rel << " > " << tolerance;
}

double L2Norm(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

}  // namespace

::testing::AssertionResult CloseToScale(const std::vector<float>& got,
                                        const std::vector<double>& want,
                                        const std::vector<double>& scale, double tolerance) {
  if (scale.size() != want.size()) {
    return ::testing::AssertionFailure() << "scale size " << scale.size() << " vs " << want.size();
  }
  return RelativeL2Within(got, want, L2Norm(scale), tolerance);
}

::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<double>& want,
                                 double tolerance, double norm_floor) {
  return RelativeL2Within(got, want, std::max(L2Norm(want), norm_floor), tolerance);
}

}  // namespace waav::testing
