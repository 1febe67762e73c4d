// LinearPlanesAppend on the CUDA backend against the CPU's Linear followed by WriteRows (the CPU
// backend does not offer the fused op): a decoder step's Q plane and K, V caches at the rows
// where HalfGemm writes the planes itself and where cuBLAS + the planes epilogue do, positions
// out of range reported like WriteRows', and bad arguments refused before anything runs.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_parity_fixture.h"

namespace waav {
namespace {

TEST_P(CudaParityTest, LinearPlanesAppendMatchesCpuLinearAndWriteRows) {
  if (!gpu_->supports(Op::kLinearPlanesAppend)) GTEST_SKIP() << "LinearPlanes off in this variant";
  EXPECT_FALSE(cpu_->supports(Op::kLinearPlanesAppend));
  struct Case {
    int64_t batch, k, c, capacity;
    int planes, first_appended;
  };
  int variant = 0;
  // Decoder steps of tiny.en's shapes (HalfGemm up to 64 rows in kFast, cuBLAS + the epilogue
  // above), odd widths (the scalar epilogue), and every plane appended or none.
  for (const Case c : {Case{1, 384, 384, 448, 3, 1}, Case{12, 384, 384, 448, 3, 1},
                       Case{64, 384, 384, 448, 3, 1}, Case{100, 384, 384, 448, 3, 1},
                       Case{9, 40, 6, 5, 3, 1}, Case{5, 16, 8, 3, 2, 0}, Case{7, 16, 8, 4, 2, 2}}) {
    for (DType dtype : {DType::kF16, DType::kF32}) {
      const bool with_bias = ++variant % 3 != 0;
      const int64_t n = c.c * c.planes, m = c.batch;
      const std::string what = absl::StrCat(
          "LinearPlanesAppend rows=", m, " k=", c.k, " ", c.planes, "x", c.c, " from plane ",
          c.first_appended, " L=", c.capacity, " w ", Name(dtype), with_bias ? "" : " no bias");
      SCOPED_TRACE(what);
      std::vector<float> w = Random(n * c.k, -0.2f, 0.2f);
      const Pair x = F32({m, 1, c.k}, Random(m * c.k));
      const Pair weight = Weight({n, c.k}, w, dtype);
      const Pair bias = F32({n}, Random(n));
      std::vector<int32_t> where(static_cast<size_t>(m));
      for (int32_t& p : where) p = RandomInt(0, static_cast<int>(c.capacity) - 1);
      const Pair positions = I32({m}, where);
      // Reference: the CPU's [M, P·C], then each appended plane's columns into its cache.
      const Pair y = Poisoned({m, 1, n});
      ASSERT_TRUE(
          cpu_->Linear(x.cpu, weight.cpu, with_bias ? &bias.cpu : nullptr, Activation::kNone, y.cpu)
              .ok());
      const std::vector<float> flat = Cpu(y.cpu);
      std::vector<Tensor> planes;
      std::vector<std::vector<float>> want;
      for (int p = 0; p < c.planes; ++p) {
        std::vector<float> columns(static_cast<size_t>(m * c.c));
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < c.c; ++j) {
            columns[static_cast<size_t>(r * c.c + j)] =
                flat[static_cast<size_t>(r * n + p * c.c + j)];
          }
        }
        if (p < c.first_appended) {
          planes.push_back(Poisoned({m, 1, c.c}).gpu);
          want.push_back(columns);
          continue;
        }
        // A cache of earlier values: only the appended rows change.
        const Pair cache = F32({m, c.capacity, c.c}, Random(m * c.capacity * c.c));
        const Pair rows = F32({m, 1, c.c}, columns);
        ASSERT_TRUE(cpu_->WriteRows(rows.cpu, positions.cpu, cache.cpu).ok());
        planes.push_back(cache.gpu);
        want.push_back(Cpu(cache.cpu));
      }
      const absl::Status status =
          gpu_->LinearPlanesAppend(x.gpu, weight.gpu, with_bias ? &bias.gpu : nullptr, planes,
                                   c.first_appended, positions.gpu);
      ASSERT_TRUE(status.ok()) << status;
      for (int p = 0; p < c.planes; ++p) {
        EXPECT_TRUE(Close(absl::StrCat(what, " plane ", p), Gpu(planes[static_cast<size_t>(p)]),
                          want[static_cast<size_t>(p)], GemmTolerance(m, dtype)));
      }
    }
  }
}

TEST_P(CudaParityTest, LinearPlanesAppendReportsPositionsAndRefusesBadArguments) {
  if (!gpu_->supports(Op::kLinearPlanesAppend)) GTEST_SKIP() << "LinearPlanes off in this variant";
  for (const int64_t rows : {2, 16, 100}) {  // the skinny, HalfGemm and cuBLAS paths
    SCOPED_TRACE(absl::StrCat(rows, " rows"));
    const Pair x = F32({rows, 384}, Random(rows * 384));
    std::vector<float> w = Random(3 * 384 * 384, -0.2f, 0.2f);
    const Pair weight = Weight({3 * 384, 384}, w, DType::kF16);
    const Pair q = Poisoned({rows, 1, 384});
    const std::vector<float> old = Random(rows * 8 * 384);
    const Pair k = F32({rows, 8, 384}, old), v = F32({rows, 8, 384}, old);
    std::vector<int32_t> where(static_cast<size_t>(rows), 3);
    where[1] = 8;  // one past the cache
    const Pair positions = I32({rows}, where);
    ASSERT_TRUE(gpu_->LinearPlanesAppend(x.gpu, weight.gpu, nullptr, {q.gpu, k.gpu, v.gpu}, 1,
                                         positions.gpu)
                    .ok());
    const absl::Status status = gpu_->Synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(std::string(status.message()).find("positions[1] = 8"), std::string::npos) << status;
    EXPECT_TRUE(gpu_->Synchronize().ok()) << "the error is reported once";
    // Row 1 of the caches is left as it was; the other rows got their new K at position 3.
    const std::vector<float> got = Gpu(k.gpu);
    for (int64_t t = 0; t < 8; ++t) {
      for (int64_t j = 0; j < 384; j += 97) {
        const size_t at = static_cast<size_t>((8 + t) * 384 + j);
        EXPECT_EQ(got[at], old[at]) << "row 1, position " << t << ", column " << j;
      }
    }
    const size_t row0 = static_cast<size_t>(3 * 384);
    EXPECT_NE(got[row0], old[row0]) << "row 0's K at position 3";
  }
  // Bad arguments: refused with InvalidArgument before anything runs.
  const Pair x = F32({4, 1, 8}, Random(32));
  std::vector<float> wv = Random(12 * 8);
  const Pair weight = Weight({12, 8}, wv, DType::kF16);
  const Pair q = Poisoned({4, 1, 4}), k = Poisoned({4, 6, 4}), v = Poisoned({4, 6, 4});
  const Pair positions = I32({4}, {0, 1, 2, 3});
  const auto code = [&](std::vector<Tensor> planes, int first, const Tensor& where) {
    return gpu_->LinearPlanesAppend(x.gpu, weight.gpu, nullptr, planes, first, where).code();
  };
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code({q.gpu, k.gpu, v.gpu}, 4, positions.gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, Poisoned({4, 5, 4}).gpu}, 1, positions.gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, Poisoned({3, 6, 4}).gpu}, 1, positions.gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, k.gpu}, 1, positions.gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, v.gpu}, 1, I32({3}, {0, 1, 2}).gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, v.gpu}, 1, positions.cpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, v.cpu}, 1, positions.gpu), kInvalid);
  EXPECT_EQ(code({q.gpu, k.gpu, PoisonedHalf({4, 6, 4})}, 1, positions.gpu), kInvalid);
  EXPECT_TRUE(code({q.gpu, k.gpu, v.gpu}, 1, positions.gpu) == absl::StatusCode::kOk);
  EXPECT_EQ(
      cpu_->LinearPlanesAppend(x.cpu, weight.cpu, nullptr, {q.cpu, k.cpu, v.cpu}, 1, positions.cpu)
          .code(),
      absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace waav
