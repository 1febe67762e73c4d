// What kernel tests share: a fixture that draws fresh random inputs (its seed printed when a test
// fails), tensors uploaded to and read back from a backend, and the relative-L2 comparisons
// against a double-precision reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/runtime/backend.h"

namespace waav::testing {

// Relative L2 error the CPU kernels meet against a double reference: f32 with another
// summation order (f16 weights are widened exactly, so the reference reads the same values).
inline constexpr double kKernelTolerance = 1e-5;

// GELU in its erfc form: exact also where 1 + erf(x/√2) would cancel (x < −8 in double).
double GeluReference(double x);

// A fixture whose random numbers come from a seed drawn from std::random_device for each test,
// printed when the test fails so that the failure can be reproduced. For a parameterised test,
// derive from this and ::testing::WithParamInterface<T>. A fixture that overrides TearDown calls
// SeededTest::TearDown.
class SeededTest : public ::testing::Test {
 protected:
  SeededTest();
  void TearDown() override;

  // `n` values uniform in [lo, hi).
  std::vector<float> Random(int64_t n, float lo = -1.0f, float hi = 1.0f);
  // Uniform in [lo, hi], both included.
  int RandomInt(int lo, int hi);

  const uint32_t seed_;
  std::mt19937 rng_;
};

// SeededTest with a backend under test, and tensors on it. The derived fixture sets `backend_`
// in SetUp. Upload and download failures are test failures (the helper returns an empty
// tensor or vector then, which the comparison after it reports too).
class KernelTest : public SeededTest {
 protected:
  Tensor F32(const Shape& shape, const std::vector<float>& values);
  Tensor I32(const Shape& shape, const std::vector<int32_t>& values);
  // A weight tensor of `dtype` (f32 or f16). For f16, `values` are rounded to f16 in place, so
  // the reference sees exactly what the kernel reads.
  Tensor Weight(const Shape& shape, std::vector<float>& values, DType dtype);
  // An f32 tensor of NaN: an output element the kernel forgets to write stays NaN and fails
  // the comparison.
  Tensor Poisoned(const Shape& shape);
  // An f32 tensor's values.
  std::vector<float> Read(const Tensor& t);

  std::unique_ptr<Backend> backend_;
};

// Relative L2 error of `got` against `want`, relative to the L2 norm of `scale`:
// ‖got − want‖ / ‖scale‖ <= tolerance (the absolute ‖got − want‖ when ‖scale‖ is 0). Fails on a
// size mismatch or any non-finite element of `got`. For sums, pass `scale[i]` = the sum of
// |terms| of output i rather than the result: a dot product that nearly cancels has a tiny
// result but an f32 rounding error the size of eps times its terms.
::testing::AssertionResult CloseToScale(const std::vector<float>& got,
                                        const std::vector<double>& want,
                                        const std::vector<double>& scale,
                                        double tolerance = kKernelTolerance);

// Against the result itself: ‖got − want‖ / max(‖want‖, norm_floor) <= tolerance, with the
// same failures. The floor is for outputs whose values cancelled (a dot product much smaller
// than its terms), where f32 rounding is large relative to the result.
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<double>& want,
                                 double tolerance = kKernelTolerance, double norm_floor = 0.0);

}  // namespace waav::testing
