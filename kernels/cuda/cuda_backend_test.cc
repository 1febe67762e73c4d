// Parity of the CUDA backend with the CPU backend (the reference): every kernel on fresh random
// inputs, a whole Whisper encoder pass and decoder steps (random weights of tiny.en's shapes), and
// graphs replayed with new positions. Without a usable GPU every test but the registry one skips
// and says why.
//
// Tolerances, relative L2 error ‖gpu − cpu‖ / ‖cpu‖ (outputs poisoned with NaN before each call):
//  * exact f32 paths: 1e-5. That is every kernel but the two below, with f32 or f16 weights
//    (f16 widened exactly), in both math modes: the skinny GEMM (<= skinny_max_rows rows), the
//    tiled GEMM, split-KV attention, layer norm, elementwise, embed, log-softmax; WriteRows is
//    bit-exact.
//  * CudaMath::kAccurate GEMMs through cuBLAS: 2e-5 (f32 weights: SGEMM without TF32; f16 weights:
//    activations as hi + lo f16 halves, 22 significant bits).
//  * CudaMath::kFast GEMMs of more rows: 3e-3 (activations rounded to f16, or TF32 for
//    f32 weights; both keep 11 significant bits, relative rounding 2^-11 ≈ 4.9e-4 per operand),
//    whether cuBLAS or our HalfGemm kernel (f16 weights, Linear and Conv1d as an implicit GEMM)
//    runs them, and f16 tensor-core attention (head_dim 64, >= 16 queries; the first flash kernel
//    or v2): 3e-3.
//  * Whole model (4 + 4 layers, errors compound): encoder output and logits 1e-4 (accurate),
//    2e-3 (fast; measured on an H200: 3e-4 encoder, 3e-5 logits).
// Every comparison prints its measured error (a line starting "parity:") for the device report.
#include "kernels/cuda/cuda_parity_fixture.h"
#include "kernels/cuda/half_gemm.cuh"

namespace waav {
namespace {

// ---- Registry (runs everywhere) -----------------------------------------------------------------

TEST(CudaBackendRegistryTest, RegisteredAboveCpuAndUnavailableWithoutGpu) {
  const std::vector<std::string> names = RegisteredBackends();
  const auto cuda = std::find(names.begin(), names.end(), "cuda");
  const auto cpu = std::find(names.begin(), names.end(), "cpu");
  ASSERT_NE(cuda, names.end());
  ASSERT_NE(cpu, names.end());
  EXPECT_LT(cuda - names.begin(), cpu - names.begin()) << "auto must try cuda first";

  auto backend = CreateBackend("cuda");
  auto chosen = CreateBackend("auto");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  if (!backend.ok()) {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
    EXPECT_FALSE(backend.status().message().empty());
    std::cout << "no usable GPU here: " << backend.status().message() << "\n";
    EXPECT_EQ((*chosen)->name(), "cpu");
    return;
  }
  EXPECT_EQ((*backend)->name(), "cuda");
  EXPECT_EQ((*backend)->device(), DeviceKind::kCuda);
  for (Op op : {Op::kLinear, Op::kConv1d, Op::kLayerNorm, Op::kAdd, Op::kGelu, Op::kAttention,
                Op::kWriteRows, Op::kEmbed, Op::kLogSoftmax, Op::kGraphCapture}) {
    EXPECT_TRUE((*backend)->supports(op));
  }
  EXPECT_EQ((*chosen)->name(), "cuda");
  std::cout << (*backend)->Describe() << "\n";
}

TEST_P(CudaParityTest, LinearMatchesCpu) {
  struct Case {
    int64_t m, k, n;
  };
  int variant = 0;
  for (const Case c :
       {Case{1, 384, 384}, Case{1, 384, 51864}, Case{2, 384, 1536}, Case{5, 37, 29},
        Case{16, 1536, 384}, Case{17, 384, 384}, Case{64, 384, 384}, Case{40, 37, 29},
        Case{300, 384, 1536}, Case{3, 0, 7},
        // HalfGemm: a 30 s window (32- and 64-row tiles), ragged M, N and K
        Case{1500, 384, 384}, Case{1500, 384, 1536}, Case{77, 40, 24}, Case{33, 1536, 392}}) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      ++variant;
      const bool with_bias = variant % 2 == 0;
      const Activation act = variant % 3 == 0 ? Activation::kGelu : Activation::kNone;
      const std::string what =
          absl::StrCat("Linear m=", c.m, " k=", c.k, " n=", c.n, " ", Name(dtype),
                       with_bias ? " bias" : "", act == Activation::kGelu ? " gelu" : "");
      SCOPED_TRACE(what);
      std::vector<float> w = Random(c.n * c.k, -0.2f, 0.2f);
      const Pair x = F32({c.m, c.k}, Random(c.m * c.k));
      const Pair weight = Weight({c.n, c.k}, w, dtype);
      const Pair bias = F32({c.n}, Random(c.n));
      const Pair y = Poisoned({c.m, c.n});
      ASSERT_TRUE(
          cpu_->Linear(x.cpu, weight.cpu, with_bias ? &bias.cpu : nullptr, act, y.cpu).ok());
      ASSERT_TRUE(
          gpu_->Linear(x.gpu, weight.gpu, with_bias ? &bias.gpu : nullptr, act, y.gpu).ok());
      EXPECT_TRUE(Close(what, Gpu(y.gpu), Cpu(y.cpu), GemmTolerance(c.m, dtype)));
    }
  }
}

// LinearResidual (GPU only: the CPU backend leaves it to Linear + Add) against the CPU's Linear
// into a temporary + Add, in place (y = residual) and not: HalfGemm's fused epilogue (variant
// FastHalfGemm), cuBLAS adding into y (in place, no activation) and the fallbacks (temporary +
// Add: skinny rows, K not a multiple of 8, an activation, not in place).
TEST_P(CudaParityTest, LinearResidualMatchesCpuLinearThenAdd) {
  struct Case {
    int64_t m, k, n;
  };
  int variant = 0;
  for (const Case c : {Case{1500, 1536, 384}, Case{1500, 384, 384}, Case{5, 384, 384},
                       Case{40, 37, 29}, Case{77, 40, 24}}) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      ++variant;
      const bool in_place = variant % 2 == 1;
      const Activation act = variant % 3 == 0 ? Activation::kGelu : Activation::kNone;
      const std::string what =
          absl::StrCat("LinearResidual m=", c.m, " k=", c.k, " n=", c.n, " ", Name(dtype),
                       in_place ? " in place" : "", act == Activation::kGelu ? " gelu" : "");
      SCOPED_TRACE(what);
      std::vector<float> w = Random(c.n * c.k, -0.2f, 0.2f);
      const Pair x = F32({c.m, c.k}, Random(c.m * c.k));
      const Pair weight = Weight({c.n, c.k}, w, dtype);
      const Pair bias = F32({c.n}, Random(c.n));
      const Pair residual = F32({c.m, c.n}, Random(c.m * c.n, -2.0f, 2.0f));
      const Pair tmp = Poisoned({c.m, c.n});
      const Pair y = Poisoned({c.m, c.n});
      ASSERT_TRUE(cpu_->Linear(x.cpu, weight.cpu, &bias.cpu, act, tmp.cpu).ok());
      ASSERT_TRUE(cpu_->Add(residual.cpu, tmp.cpu, y.cpu).ok());
      const Tensor& out = in_place ? residual.gpu : y.gpu;
      ASSERT_TRUE(gpu_->LinearResidual(x.gpu, weight.gpu, &bias.gpu, act, residual.gpu, out).ok());
      EXPECT_TRUE(Close(what, Gpu(out), Cpu(y.cpu), GemmTolerance(c.m, dtype)));
    }
  }
  EXPECT_EQ(gpu_->supports(Op::kLinearResidual),
            GetParam().defaults ? CudaBackendOptions{}.linear_residual : GetParam().residual);
  EXPECT_FALSE(cpu_->supports(Op::kLinearResidual));
}

// The bias of a cuBLAS GEMM without activation: in cuBLASLt's epilogue (the default), by the
// epilogue kernel where the bias is not 16-byte aligned (cuBLASLt declines it) and where the
// option is off; each against the CPU, plain and adding into y (beta = 1, LinearResidual).
TEST_P(CudaParityTest, CublasBiasEpilogueAndItsFallbacksMatchCpu) {
  if (!GetParam().defaults || GetParam().encoder_no_pdl || GetParam().decode_attention) {
    GTEST_SKIP() << "run on the Fast variant only";
  }
  const int64_t m = 64, k = 384, n = 1536;  // above HalfGemm's N: a cuBLAS GEMM
  std::vector<float> w = Random(n * k, -0.2f, 0.2f);
  const Pair x = F32({m, k}, Random(m * k));
  const Pair weight = Weight({n, k}, w, DType::kF16);
  const Pair biases = F32({n + 1}, Random(n + 1));
  const Pair residual = F32({m, n}, Random(m * n, -2.0f, 2.0f));
  for (const bool lt : {true, false}) {
    CudaBackendOptions options;
    options.blas_bias_epilogue = lt;
    auto made = CreateCudaBackend(options);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& gpu = **made;
    auto upload = [&](const Tensor& cpu_tensor) {
      auto t = Upload(gpu, cpu_tensor.shape(), cpu_tensor.dtype(), cpu_tensor.data());
      EXPECT_TRUE(t.ok()) << t.status();
      return *t;
    };
    const Tensor gx = upload(x.cpu), gw = upload(weight.cpu), gb = upload(biases.cpu);
    for (const int64_t offset : {0, 1}) {  // 1: 4 bytes off, cuBLASLt declines
      const std::string what = absl::StrCat(lt ? "cuBLASLt epilogue" : "epilogue kernel",
                                            offset ? ", bias 4 bytes off" : "");
      SCOPED_TRACE(what);
      const Tensor cpu_bias = *biases.cpu.Slice(offset, offset + n);
      const Tensor gpu_bias = *gb.Slice(offset, offset + n);
      const Pair want = Poisoned({m, n});
      ASSERT_TRUE(cpu_->Linear(x.cpu, weight.cpu, &cpu_bias, Activation::kNone, want.cpu).ok());
      const std::vector<float> nan(static_cast<size_t>(m * n), kNaN);
      auto y = Upload(gpu, {m, n}, DType::kF32, nan.data());
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_TRUE(gpu.Linear(gx, gw, &gpu_bias, Activation::kNone, *y).ok());
      auto got_y = Download<float>(gpu, *y);
      ASSERT_TRUE(got_y.ok()) << got_y.status();
      EXPECT_TRUE(Close(what, *got_y, Cpu(want.cpu), GemmTolerance(m, DType::kF16)));
      // In place: y = residual + x·wᵀ + bias.
      std::vector<float> sum = Cpu(want.cpu);
      const std::vector<float> r = Cpu(residual.cpu);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += r[i];
      const Tensor into = upload(residual.cpu);
      ASSERT_TRUE(gpu.LinearResidual(gx, gw, &gpu_bias, Activation::kNone, into, into).ok());
      auto got = Download<float>(gpu, into);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(Close(what + " in place", *got, sum, GemmTolerance(m, DType::kF16)));
    }
  }
}

// HalfGemm's split K: the plan (host only, runs without a GPU) splits the few-row GEMMs of a
// decoder step into non-empty ranges of at least two steps, and leaves full grids alone.
TEST(HalfGemmSplitKTest, PlanSplitsOnlyFewRowGemmsIntoNonEmptyRanges) {
  constexpr int kSms = 132;
  // 64 x 384 in 24 tiles of 32 x 32: up to 264 blocks wanted, 12 steps of K, 6 ranges of 2.
  EXPECT_EQ(cuda::HalfGemmSplits(64, 384, 384, true, kSms, 2), 6);
  EXPECT_EQ(cuda::HalfGemmSplits(64, 384, 1536, true, kSms, 2), 10);  // 48 steps, ranges of 5
  EXPECT_EQ(cuda::HalfGemmSplits(64, 384, 384, true, kSms, 0), 1);    // off
  EXPECT_EQ(cuda::HalfGemmSplits(1500, 384, 384, true, kSms, 2), 1);  // a window fills the grid
  EXPECT_EQ(cuda::HalfGemmSplits(64, 384, 64, true, kSms, 2), 1);     // 2 steps: one range
  EXPECT_EQ(cuda::HalfGemmSplits(0, 384, 384, true, kSms, 2), 1);
  EXPECT_EQ(cuda::HalfGemmSplitBytes(64, 384, 6), size_t{6} * 64 * 384 * 4);
  EXPECT_EQ(cuda::HalfGemmSplitBytes(64, 384, 1), 0u);
  for (int64_t m : {9, 33, 64, 128, 256}) {
    for (int64_t k = 8; k <= 4096; k += 8) {
      for (int waves : {1, 2, 4}) {
        const int splits = cuda::HalfGemmSplits(m, 384, k, true, kSms, waves);
        const int64_t steps = (k + 31) / 32;
        ASSERT_GE(splits, 1);
        ASSERT_LE(splits, std::max<int64_t>(1, steps / 2)) << "m " << m << " k " << k;
        const int64_t per = (steps + splits - 1) / splits;
        ASSERT_LT((splits - 1) * per, steps) << "empty range: m " << m << " k " << k;
      }
    }
  }
}

// Split few-row GEMMs against the CPU (f16 rounding of x: kFastGemm) and against the same
// backend options unsplit (the same f16 products summed in another order: 1e-5), with bias,
// GELU, residuals in place and not, ragged K; each twice, so that a tile's arrival counter left
// non-zero by the first would break the second.
TEST(HalfGemmSplitKTest, FewRowGemmsMatchCpuAndUnsplit) {
  CudaBackendOptions split_options;
  split_options.half_gemm_few_rows = 256;
  split_options.half_gemm_split_k_waves = 4;
  CudaBackendOptions whole_options = split_options;
  whole_options.half_gemm_split_k_waves = 0;
  auto split = CreateCudaBackend(split_options);
  if (!split.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << split.status().message();
  auto whole = CreateCudaBackend(whole_options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto cpu = CreateCpuBackend({});
  std::mt19937 rng(std::random_device{}());
  auto random = [&](int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
  };
  struct Case {
    int64_t m, k, n;
  };
  int variant = 0;
  for (const Case c :
       {Case{64, 384, 384}, Case{64, 1536, 384}, Case{64, 384, 1536}, Case{17, 392, 384},
        Case{48, 1536, 392}, Case{9, 384, 384}, Case{256, 1536, 384}, Case{64, 40, 24}}) {
    ++variant;
    const bool residual = variant % 2 == 0, in_place = variant % 4 == 0;
    const Activation act = variant % 3 == 0 ? Activation::kGelu : Activation::kNone;
    const std::string what =
        absl::StrCat("split-K Linear m=", c.m, " k=", c.k, " n=", c.n, residual ? " residual" : "",
                     in_place ? " in place" : "", act == Activation::kGelu ? " gelu" : "");
    SCOPED_TRACE(what);
    std::vector<float> w = random(c.n * c.k, -0.2f, 0.2f);
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = FloatToHalf(w[i]);
      w[i] = HalfToFloat(w16[i]);
    }
    const std::vector<float> x = random(c.m * c.k, -1.0f, 1.0f);
    const std::vector<float> bias = random(c.n, -1.0f, 1.0f);
    const std::vector<float> res = random(c.m * c.n, -2.0f, 2.0f);
    // The CPU reference: Linear, then the residual added.
    auto cx = Upload(*cpu, {c.m, c.k}, DType::kF32, x.data());
    auto cw = Upload(*cpu, {c.n, c.k}, DType::kF32, w.data());
    auto cb = Upload(*cpu, {c.n}, DType::kF32, bias.data());
    auto cy = cpu->Allocate({c.m, c.n}, DType::kF32);
    ASSERT_TRUE(cx.ok() && cw.ok() && cb.ok() && cy.ok());
    ASSERT_TRUE(cpu->Linear(*cx, *cw, &*cb, act, *cy).ok());
    auto want = Download<float>(*cpu, *cy);
    ASSERT_TRUE(want.ok());
    if (residual) {
      for (size_t i = 0; i < want->size(); ++i) (*want)[i] += res[i];
    }
    std::vector<float> got[2];
    for (int which = 0; which < 2; ++which) {
      Backend& gpu = which == 0 ? **split : **whole;
      auto gx = Upload(gpu, {c.m, c.k}, DType::kF32, x.data());
      auto gw = Upload(gpu, {c.n, c.k}, DType::kF16, w16.data());
      auto gb = Upload(gpu, {c.n}, DType::kF32, bias.data());
      auto gr = Upload(gpu, {c.m, c.n}, DType::kF32, res.data());
      auto gy = gpu.Allocate({c.m, c.n}, DType::kF32);
      ASSERT_TRUE(gx.ok() && gw.ok() && gb.ok() && gr.ok() && gy.ok());
      const Tensor& out = in_place ? *gr : *gy;
      for (int repeat = 0; repeat < 2; ++repeat) {
        if (in_place) {
          ASSERT_TRUE(gpu.CopyFromHost(res.data(), res.size() * 4, *gr).ok());  // again each run
        }
        const absl::Status status = residual ? gpu.LinearResidual(*gx, *gw, &*gb, act, *gr, out)
                                             : gpu.Linear(*gx, *gw, &*gb, act, out);
        ASSERT_TRUE(status.ok()) << status;
        auto v = Download<float>(gpu, out);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_TRUE(Close(absl::StrCat(what, which == 0 ? " split" : " unsplit", " run ", repeat),
                          *v, *want, kFastGemm));
        got[which] = *v;
      }
    }
    EXPECT_TRUE(Close(what + " split against unsplit", got[0], got[1], kExact));
  }
}

TEST_P(CudaParityTest, Conv1dMatchesCpu) {
  struct Case {
    int64_t batch, time, cin, cout, kernel;
    int stride, padding;
  };
  for (const Case c : {Case{1, 200, 80, 64, 3, 1, 1}, Case{2, 100, 64, 48, 3, 2, 1},
                       Case{1, 9, 5, 7, 4, 3, 2}, Case{2, 6, 8, 3, 1, 1, 0},
                       // Whisper's two convolutions (implicit GEMM), and batch 2 at stride 2
                       Case{1, 3000, 80, 384, 3, 1, 1}, Case{1, 3000, 384, 384, 3, 2, 1},
                       Case{2, 301, 384, 64, 3, 2, 1}}) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      const int64_t t_out = (c.time + 2 * c.padding - c.kernel) / c.stride + 1;
      const std::string what =
          absl::StrCat("Conv1d B=", c.batch, " T=", c.time, " Cin=", c.cin, " Cout=", c.cout,
                       " K=", c.kernel, " s=", c.stride, " p=", c.padding, " ", Name(dtype));
      SCOPED_TRACE(what);
      std::vector<float> w = Random(c.cout * c.cin * c.kernel, -0.3f, 0.3f);
      const Pair x = F32({c.batch, c.time, c.cin}, Random(c.batch * c.time * c.cin));
      const Pair weight = Weight({c.cout, c.cin, c.kernel}, w, dtype);
      const Pair bias = F32({c.cout}, Random(c.cout));
      const Pair y = Poisoned({c.batch, t_out, c.cout});
      ASSERT_TRUE(
          cpu_->Conv1d(x.cpu, weight.cpu, bias.cpu, c.stride, c.padding, Activation::kGelu, y.cpu)
              .ok());
      ASSERT_TRUE(
          gpu_->Conv1d(x.gpu, weight.gpu, bias.gpu, c.stride, c.padding, Activation::kGelu, y.gpu)
              .ok());
      EXPECT_TRUE(Close(what, Gpu(y.gpu), Cpu(y.cpu), GemmTolerance(c.batch * t_out, dtype)));
    }
  }
}

TEST_P(CudaParityTest, LayerNormMatchesCpuAlsoInPlace) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 384}, {7, 37}, {300, 384}, {3, 1}, {2, 768}, {3, 1536}}) {
    const std::string what = absl::StrCat("LayerNorm ", rows, "x", cols);
    const std::vector<float> values = Random(rows * cols, -3.0f, 5.0f);
    const Pair gamma = F32({cols}, Random(cols, 0.5f, 1.5f));
    const Pair beta = F32({cols}, Random(cols));
    const Pair x = F32({rows, cols}, values);
    const Pair y = Poisoned({rows, cols});
    ASSERT_TRUE(cpu_->LayerNorm(x.cpu, gamma.cpu, beta.cpu, 1e-5f, y.cpu).ok());
    ASSERT_TRUE(gpu_->LayerNorm(x.gpu, gamma.gpu, beta.gpu, 1e-5f, y.gpu).ok());
    EXPECT_TRUE(Close(what, Gpu(y.gpu), Cpu(y.cpu), kExact));
    ASSERT_TRUE(gpu_->LayerNorm(x.gpu, gamma.gpu, beta.gpu, 1e-5f, x.gpu).ok());
    EXPECT_TRUE(Close(what + " in place", Gpu(x.gpu), Cpu(y.cpu), kExact));
  }
}

// f16 activations (CudaBackendOptions::half_activations): LayerNorm writing f16, Linear reading
// f16 x (the f16 cuBLAS GEMM as it is; other paths widen it first) and writing f16 y, and
// LinearResidual reading f16 x, against the CPU on the same (f16-representable) values in f32.
// Tolerances: an f16 result adds its rounding (2^-11 relative at most, ~3e-4 in L2) to the
// path's own: 1e-3 for LayerNorm, the GEMM tolerance + 1e-3 for Linear.
TEST_P(CudaParityTest, HalfActivationsMatchCpu) {
  if (!half_activations_) GTEST_SKIP() << "f16 activations off in this variant";
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1500, 384}, {7, 37}, {3, 1536}}) {
    const std::string what = absl::StrCat("LayerNorm -> f16 ", rows, "x", cols);
    SCOPED_TRACE(what);
    const Pair gamma = F32({cols}, Random(cols, 0.5f, 1.5f));
    const Pair beta = F32({cols}, Random(cols));
    const Pair x = F32({rows, cols}, Random(rows * cols, -3.0f, 5.0f));
    const Pair y = Poisoned({rows, cols});
    const Tensor y16 = PoisonedHalf({rows, cols});
    ASSERT_TRUE(cpu_->LayerNorm(x.cpu, gamma.cpu, beta.cpu, 1e-5f, y.cpu).ok());
    ASSERT_TRUE(gpu_->LayerNorm(x.gpu, gamma.gpu, beta.gpu, 1e-5f, y16).ok());
    EXPECT_TRUE(Close(what, GpuHalf(y16), Cpu(y.cpu), 1e-3));
  }
  struct Case {
    int64_t m, k, n;
  };
  int variant = 0;
  for (const Case c : {Case{1500, 384, 1536}, Case{1500, 1536, 384}, Case{5, 384, 384},
                       Case{77, 40, 24}, Case{40, 37, 29}}) {
    for (DType dtype : {DType::kF16, DType::kF32}) {
      ++variant;
      const bool x_half = variant % 3 != 2, y_half = variant % 2 == 1;
      const Activation act = variant % 4 < 2 ? Activation::kGelu : Activation::kNone;
      const std::string what = absl::StrCat(
          "Linear m=", c.m, " k=", c.k, " n=", c.n, " w ", Name(dtype), x_half ? " x f16" : "",
          y_half ? " y f16" : "", act == Activation::kGelu ? " gelu" : "");
      SCOPED_TRACE(what);
      std::vector<float> w = Random(c.n * c.k, -0.2f, 0.2f);
      std::vector<float> xv = Random(c.m * c.k);
      const Tensor x16 = HalfGpu({c.m, c.k}, xv);  // rounds xv: both sides see the same x
      const Pair x = F32({c.m, c.k}, xv);
      const Pair weight = Weight({c.n, c.k}, w, dtype);
      const Pair bias = F32({c.n}, Random(c.n));
      const Pair y = Poisoned({c.m, c.n});
      const Tensor y16 = PoisonedHalf({c.m, c.n});
      ASSERT_TRUE(cpu_->Linear(x.cpu, weight.cpu, &bias.cpu, act, y.cpu).ok());
      ASSERT_TRUE(
          gpu_->Linear(x_half ? x16 : x.gpu, weight.gpu, &bias.gpu, act, y_half ? y16 : y.gpu)
              .ok());
      const double tolerance = GemmTolerance(c.m, dtype) + (y_half ? 1e-3 : 0.0);
      EXPECT_TRUE(Close(what, y_half ? GpuHalf(y16) : Gpu(y.gpu), Cpu(y.cpu), tolerance));
      if (!x_half || act != Activation::kNone) continue;
      // LinearResidual with f16 x, in place (the encoder's FFN2).
      const std::vector<float> r = Random(c.m * c.n);
      const Pair res = F32({c.m, c.n}, r);
      const Pair sum = Poisoned({c.m, c.n});
      ASSERT_TRUE(cpu_->Add(res.cpu, y.cpu, sum.cpu).ok());
      ASSERT_TRUE(gpu_->LinearResidual(x16, weight.gpu, &bias.gpu, act, res.gpu, res.gpu).ok());
      EXPECT_TRUE(Close(what + " residual", Gpu(res.gpu), Cpu(sum.cpu), GemmTolerance(c.m, dtype)));
    }
  }
  // An f16 y with a residual, or f16 where an f32 is needed, is refused.
  const Tensor x16 = PoisonedHalf({4, 8});
  std::vector<float> w(64, 0.5f);
  const Pair weight = Weight({8, 8}, w, DType::kF16);
  const Tensor y16 = PoisonedHalf({4, 8});
  EXPECT_FALSE(gpu_->LinearResidual(x16, weight.gpu, nullptr, Activation::kNone, y16, y16).ok());
  EXPECT_FALSE(gpu_->Add(y16, y16, y16).ok());
}

TEST_P(CudaParityTest, AddAndGeluMatchCpuAlsoInPlace) {
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1024}, int64_t{100003}}) {
    const Pair a = F32({n}, Random(n, -6.0f, 6.0f));
    const Pair b = F32({n}, Random(n));
    const Pair y = Poisoned({n});
    ASSERT_TRUE(cpu_->Add(a.cpu, b.cpu, y.cpu).ok());
    ASSERT_TRUE(gpu_->Add(a.gpu, b.gpu, y.gpu).ok());
    EXPECT_TRUE(Close(absl::StrCat("Add n=", n), Gpu(y.gpu), Cpu(y.cpu), kExact));
    const Pair g = Poisoned({n});
    ASSERT_TRUE(cpu_->Gelu(a.cpu, g.cpu).ok());
    ASSERT_TRUE(gpu_->Gelu(a.gpu, g.gpu).ok());
    EXPECT_TRUE(Close(absl::StrCat("Gelu n=", n), Gpu(g.gpu), Cpu(g.cpu), kExact));
    ASSERT_TRUE(gpu_->Add(a.gpu, b.gpu, a.gpu).ok());
    EXPECT_TRUE(Close(absl::StrCat("Add in place n=", n), Gpu(a.gpu), Cpu(y.cpu), kExact));
    ASSERT_TRUE(gpu_->Gelu(b.gpu, b.gpu).ok());
    ASSERT_TRUE(cpu_->Gelu(b.cpu, b.cpu).ok());
    EXPECT_TRUE(Close(absl::StrCat("Gelu in place n=", n), Gpu(b.gpu), Cpu(b.cpu), kExact));
  }
}

// b of a's trailing dims, added to every leading row (the encoder's positions, one call for a
// batch of windows): float4 steps where the rows are multiples of 4, else one value a step.
TEST_P(CudaParityTest, AddBroadcastsTrailingDimsLikeCpu) {
  for (const auto& [a_shape, b_shape] : std::vector<std::pair<Shape, Shape>>{
           {{5, 1}, {1}}, {{3, 7}, {7}}, {{2, 3, 12}, {3, 12}}, {{16, 1500, 384}, {1500, 384}}}) {
    const std::string what = absl::StrCat("Add ", a_shape.ToString(), " + ", b_shape.ToString());
    const Pair a = F32(a_shape, Random(a_shape.numel(), -3.0f, 3.0f));
    const Pair b = F32(b_shape, Random(b_shape.numel()));
    const Pair y = Poisoned(a_shape);
    ASSERT_TRUE(cpu_->Add(a.cpu, b.cpu, y.cpu).ok());
    ASSERT_TRUE(gpu_->Add(a.gpu, b.gpu, y.gpu).ok());
    EXPECT_TRUE(Close(what, Gpu(y.gpu), Cpu(y.cpu), kExact));
    ASSERT_TRUE(gpu_->Add(a.gpu, b.gpu, a.gpu).ok());
    EXPECT_TRUE(Close(what + " in place", Gpu(a.gpu), Cpu(y.cpu), kExact));
    EXPECT_EQ(gpu_->Add(a.gpu, y.gpu, b.gpu).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(CudaParityTest, LogSoftmaxMatchesCpuAlsoInPlace) {
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 51864}, {3, 7}, {64, 1000}}) {
    const std::string what = absl::StrCat("LogSoftmax ", rows, "x", cols);
    const Pair x = F32({rows, cols}, Random(rows * cols, -20.0f, 20.0f));
    const Pair y = Poisoned({rows, cols});
    ASSERT_TRUE(cpu_->LogSoftmax(x.cpu, y.cpu).ok());
    ASSERT_TRUE(gpu_->LogSoftmax(x.gpu, y.gpu).ok());
    EXPECT_TRUE(Close(what, Gpu(y.gpu), Cpu(y.cpu), kExact));
    ASSERT_TRUE(gpu_->LogSoftmax(x.gpu, x.gpu).ok());
    EXPECT_TRUE(Close(what + " in place", Gpu(x.gpu), Cpu(y.cpu), kExact));
  }
}

// The greedy choice: the same token and maximum as the CPU backend, the sum to f64 rounding
// (another order); rows left out stay unwritten; a bad mask index is reported. Every kernel: a
// cluster of 16 blocks per row (the default while the rows' clusters fit on the GPU at once:
// 1 to 9 rows here; 8 blocks above), of 8, and one block per row.
// Vocabularies of Whisper's sizes (51864; large-v3's 51866, not whole mask words) and small
// ones (fewer columns than the cluster's blocks have mask words); ties at the maximum in
// different blocks' slices; rows all disabled, and rows of −inf.
TEST_P(CudaParityTest, ArgmaxLogSumExpMatchesCpu) {
  CudaBackendOptions one_block_options, eight_options;
  one_block_options.argmax_cluster_blocks = 0;
  eight_options.argmax_cluster_blocks = 8;
  auto one_block = CreateCudaBackend(one_block_options);
  auto eight = CreateCudaBackend(eight_options);
  ASSERT_TRUE(one_block.ok()) << one_block.status();
  ASSERT_TRUE(eight.ok()) << eight.status();
  struct Case {
    int64_t rows, cols;
  };
  for (const Case c : {Case{1, 51864}, Case{5, 51866}, Case{64, 51864}, Case{3, 7}, Case{2, 100},
                       Case{9, 1000}, Case{300, 333}}) {
    const int64_t rows = c.rows, cols = c.cols, masks = 4, words = (cols + 31) / 32;
    std::vector<float> x = Random(rows * cols, -20.0f, 20.0f);
    for (int64_t r = 0; r < rows; ++r) {  // ties at the maximum: the lower id must win
      const bool spread = r % 2 == 0;     // one in the first eighth, one in the last
      const int64_t a = spread ? RandomInt(0, static_cast<int>(cols / 8))
                               : RandomInt(0, static_cast<int>(cols) - 1);
      const int64_t b =
          spread ? RandomInt(static_cast<int>(cols - cols / 8 - 1), static_cast<int>(cols) - 1)
                 : RandomInt(0, static_cast<int>(cols) - 1);
      x[static_cast<size_t>(r * cols + a)] = x[static_cast<size_t>(r * cols + b)] = 21.0f;
      if (r % 7 == 3) {  // a row of −inf but one or two values
        for (int64_t i = 0; i < cols; ++i) {
          if (i != a && i != b) x[static_cast<size_t>(r * cols + i)] = -INFINITY;
        }
      }
    }
    std::vector<int32_t> bits(static_cast<size_t>(masks * words));
    for (int64_t w = 0; w < words; ++w) {
      bits[static_cast<size_t>(w)] = static_cast<int32_t>(rng_());
      bits[static_cast<size_t>(words + w)] = 0;
      bits[static_cast<size_t>(2 * words + w)] = -1;  // every token disabled
      bits[static_cast<size_t>(3 * words + w)] = static_cast<int32_t>(rng_() | rng_());
    }
    std::vector<int32_t> index(static_cast<size_t>(rows));
    for (int32_t& i : index) i = RandomInt(-1, static_cast<int>(masks) - 1);
    const Pair logits = F32({rows, cols}, x), m = I32({masks, words}, bits),
               idx = I32({rows}, index);
    const Pair want = Poisoned({rows, 5});
    ASSERT_TRUE(cpu_->ArgmaxLogSumExp(logits.cpu, m.cpu, idx.cpu, want.cpu).ok());
    const std::vector<float> cpu_out = Cpu(want.cpu);
    for (const int blocks : {16, 8, 0}) {
      const std::string what = absl::StrCat(
          "ArgmaxLogSumExp ", rows, "x", cols, " (",
          blocks > 0 ? absl::StrCat("clusters of ", blocks) : std::string("one block a row"), ")");
      SCOPED_TRACE(what);
      Backend& gpu = blocks == 16 ? *gpu_ : (blocks == 8 ? **eight : **one_block);
      auto upload = [&](const Tensor& cpu_tensor) {
        auto t = Upload(gpu, cpu_tensor.shape(), cpu_tensor.dtype(), cpu_tensor.data());
        EXPECT_TRUE(t.ok()) << t.status();
        return *t;
      };
      const std::vector<float> nan(static_cast<size_t>(rows * 5), kNaN);
      const Tensor gx = upload(logits.cpu), gm = upload(m.cpu), gi = upload(idx.cpu);
      auto out = Upload(gpu, {rows, 5}, DType::kF32, nan.data());
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_TRUE(gpu.ArgmaxLogSumExp(gx, gm, gi, *out).ok());
      auto got = Download<float>(gpu, *out);
      ASSERT_TRUE(got.ok()) << got.status();
      for (int64_t r = 0; r < rows; ++r) {
        const float* cr = cpu_out.data() + r * 5;
        const float* gr = got->data() + r * 5;
        if (index[static_cast<size_t>(r)] < 0) {
          for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(gr[i])) << "row " << r;
          continue;
        }
        EXPECT_EQ(gr[0], cr[0]) << "row " << r;
        EXPECT_EQ(gr[1], cr[1]) << "row " << r;
        const double sc = JoinF64(cr + 2), sg = JoinF64(gr + 2);
        EXPECT_LE(std::abs(sg - sc), 1e-12 * std::max(1.0, sc)) << "row " << r;
      }
    }
  }
  for (Backend* backend : {gpu_.get(), eight->get(), one_block->get()}) {
    Backend& gpu = *backend;
    const std::vector<float> values = Random(200);
    const std::vector<int32_t> zeros = {0, 0, 0, 0}, bad_index = {0, 1};
    auto logits = Upload(gpu, {2, 100}, DType::kF32, values.data());
    auto m = Upload(gpu, {1, 4}, DType::kI32, zeros.data());
    auto bad = Upload(gpu, {2}, DType::kI32, bad_index.data());
    auto out = gpu.Allocate({2, 5}, DType::kF32);
    ASSERT_TRUE(logits.ok() && m.ok() && bad.ok() && out.ok());
    ASSERT_TRUE(gpu.ArgmaxLogSumExp(*logits, *m, *bad, *out).ok());
    const absl::Status reported = gpu.Synchronize();
    EXPECT_EQ(reported.code(), absl::StatusCode::kInvalidArgument) << reported;
    EXPECT_NE(reported.message().find("mask_index[1] = 1"), absl::string_view::npos) << reported;
  }
}

TEST_P(CudaParityTest, EmbedMatchesCpu) {
  const int64_t batch = 3, time = 2, channels = 384, vocab = 1000, positions = 448;
  for (DType token_dtype : {DType::kF32, DType::kF16}) {
    for (DType position_dtype : {DType::kF32, DType::kF16}) {
      std::vector<float> table = Random(vocab * channels);
      std::vector<float> position_table = Random(positions * channels);
      std::vector<int32_t> tokens(batch * time), starts(batch);
      for (int32_t& t : tokens) t = RandomInt(0, vocab - 1);
      for (int32_t& s : starts) s = RandomInt(0, positions - time);
      const Pair tok = I32({batch, time}, tokens);
      const Pair start = I32({batch}, starts);
      const Pair tt = Weight({vocab, channels}, table, token_dtype);
      const Pair pt = Weight({positions, channels}, position_table, position_dtype);
      const Pair y = Poisoned({batch, time, channels});
      ASSERT_TRUE(cpu_->Embed(tok.cpu, start.cpu, tt.cpu, pt.cpu, y.cpu).ok());
      ASSERT_TRUE(gpu_->Embed(tok.gpu, start.gpu, tt.gpu, pt.gpu, y.gpu).ok());
      EXPECT_TRUE(Close(absl::StrCat("Embed ", Name(token_dtype), "/", Name(position_dtype)),
                        Gpu(y.gpu), Cpu(y.cpu), kExact));
    }
  }
}

TEST_P(CudaParityTest, WriteRowsMatchesCpuBitForBit) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI32}) {
    for (int64_t channels : {int64_t{384}, int64_t{5}}) {
      const int64_t batch = 3, rows = 2, capacity = 10;
      std::vector<int32_t> src(batch * rows * channels), dst(batch * capacity * channels);
      for (int32_t& v : src) v = static_cast<int32_t>(rng_());
      for (int32_t& v : dst) v = static_cast<int32_t>(rng_());
      std::vector<int32_t> positions(batch);
      for (int32_t& p : positions) p = RandomInt(0, capacity - rows);
      // Reinterpret the random words as elements of `dtype` (f16: two per word).
      const size_t elem = SizeOf(dtype);
      const Pair s = Make({batch, rows, channels}, dtype, src.data());
      const Pair d = Make({batch, capacity, channels}, dtype, dst.data());
      const Pair pos = I32({batch}, positions);
      ASSERT_TRUE(cpu_->WriteRows(s.cpu, pos.cpu, d.cpu).ok());
      ASSERT_TRUE(gpu_->WriteRows(s.gpu, pos.gpu, d.gpu).ok());
      std::vector<char> want(d.cpu.size_bytes()), got(d.gpu.size_bytes());
      ASSERT_TRUE(cpu_->CopyToHost(d.cpu, want.data(), want.size()).ok());
      ASSERT_TRUE(gpu_->CopyToHost(d.gpu, got.data(), got.size()).ok());
      EXPECT_EQ(want, got) << "WriteRows " << DTypeName(dtype) << " channels " << channels
                           << " (element size " << elem << ")";
    }
  }
}

// The P planes of a [P, ...] tensor, as separate tensors.
std::vector<Tensor> PlanesOf(const Tensor& stacked) {
  std::vector<Tensor> planes;
  for (int64_t p = 0; p < stacked.dim(0); ++p) planes.push_back(*stacked.Slice(p, p + 1));
  return planes;
}

TEST_P(CudaParityTest, LinearPlanesMatchesCpuLinear) {
  if (!gpu_->supports(Op::kLinearPlanes)) GTEST_SKIP() << "LinearPlanes off in this variant";
  EXPECT_FALSE(cpu_->supports(Op::kLinearPlanes));
  struct Case {
    int64_t m, k, c;
    int planes;
    bool half;      // f16 x and y (needs f16 activations)
    bool separate;  // each plane its own allocation (as the decoder's cross K/V caches)
  };
  int variant = 0;
  for (const Case c : {Case{1500, 384, 384, 3, true, false}, Case{3000, 384, 384, 3, true, false},
                       Case{1500, 384, 384, 3, false, false}, Case{1500, 384, 384, 8, false, true},
                       Case{40, 37, 6, 3, true, true}, Case{33, 24, 5, 2, false, false},
                       Case{7, 16, 8, 4, false, true}, Case{5, 8, 4, 16, false, true},
                       // A decoder step's Q, K and V (HalfGemm writing the planes in kFast).
                       Case{64, 384, 384, 3, false, true}, Case{17, 384, 384, 3, false, false},
                       Case{256, 384, 384, 3, false, true}, Case{9, 40, 8, 2, false, true}}) {
    for (DType dtype : {DType::kF16, DType::kF32}) {
      const bool half = c.half && half_activations_;
      const bool with_bias = ++variant % 3 != 0;
      const int64_t n = c.c * c.planes;
      const std::string what = absl::StrCat(
          "LinearPlanes m=", c.m, " k=", c.k, " ", c.planes, "x", c.c, " w ", Name(dtype),
          half ? " x, y f16" : "", with_bias ? "" : " no bias", c.separate ? " separate" : "");
      SCOPED_TRACE(what);
      std::vector<float> w = Random(n * c.k, -0.2f, 0.2f);
      std::vector<float> xv = Random(c.m * c.k);
      const Tensor x16 = HalfGpu({c.m, c.k}, xv);  // rounds xv: both sides see the same x
      const Pair x = F32({c.m, c.k}, xv);
      const Pair weight = Weight({n, c.k}, w, dtype);
      const Pair bias = F32({n}, Random(n));
      const Pair y = Poisoned({c.m, n});
      std::vector<Tensor> planes;
      if (c.separate) {
        for (int p = 0; p < c.planes; ++p) {
          planes.push_back(half ? PoisonedHalf({c.m, c.c}) : Poisoned({c.m, c.c}).gpu);
        }
      } else {
        planes = PlanesOf(half ? PoisonedHalf({c.planes, c.m, c.c})
                               : Poisoned({c.planes, c.m, c.c}).gpu);
      }
      ASSERT_TRUE(
          cpu_->Linear(x.cpu, weight.cpu, with_bias ? &bias.cpu : nullptr, Activation::kNone, y.cpu)
              .ok());
      const absl::Status status = gpu_->LinearPlanes(half ? x16 : x.gpu, weight.gpu,
                                                     with_bias ? &bias.gpu : nullptr, planes);
      ASSERT_TRUE(status.ok()) << status;
      // The CPU's [M, P·C]: plane p is its columns [p·C, p·C + C).
      const std::vector<float> flat = Cpu(y.cpu);
      const double tolerance = GemmTolerance(c.m, dtype) + (half ? 1e-3 : 0.0);
      for (int p = 0; p < c.planes; ++p) {
        std::vector<float> want(static_cast<size_t>(c.m * c.c));
        for (int64_t r = 0; r < c.m; ++r) {
          for (int64_t j = 0; j < c.c; ++j) {
            want[static_cast<size_t>(r * c.c + j)] = flat[static_cast<size_t>(r * n + p * c.c + j)];
          }
        }
        EXPECT_TRUE(Close(
            absl::StrCat(what, " plane ", p),
            half ? GpuHalf(planes[static_cast<size_t>(p)]) : Gpu(planes[static_cast<size_t>(p)]),
            want, tolerance));
      }
    }
  }
  // Bad arguments: plane counts that do not divide the rows (or none, or too many), a plane of
  // the wrong size or dtype, planes that overlap each other or the input.
  const Pair x = F32({4, 8}, Random(32));
  std::vector<float> wv = Random(12 * 8);
  const Pair weight = Weight({12, 8}, wv, DType::kF16);
  const std::vector<Tensor> three = PlanesOf(Poisoned({3, 4, 4}).gpu);
  const auto code = [&](absl::Span<const Tensor> planes) {
    return gpu_->LinearPlanes(x.gpu, weight.gpu, nullptr, planes).code();
  };
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(absl::MakeConstSpan(three).subspan(0, 2)), kInvalid);
  EXPECT_EQ(code({}), kInvalid);
  EXPECT_EQ(code({three[0], three[1], three[2], Poisoned({4, 4}).gpu, Poisoned({4, 4}).gpu}),
            kInvalid);
  std::vector<float> wide = Random(48 * 8);
  const Pair weight48 = Weight({48, 8}, wide, DType::kF16);
  std::vector<Tensor> too_many;
  for (int p = 0; p < Backend::kMaxLinearPlanes * 3; ++p) too_many.push_back(Poisoned({4, 1}).gpu);
  EXPECT_EQ(gpu_->LinearPlanes(x.gpu, weight48.gpu, nullptr, too_many).code(), kInvalid);
  EXPECT_EQ(code({three[0], three[1], Poisoned({4, 5}).gpu}), kInvalid);
  EXPECT_EQ(code({three[0], three[1], Poisoned({3, 4}).gpu}), kInvalid);
  if (half_activations_) {
    EXPECT_EQ(code({three[0], three[1], PoisonedHalf({4, 4})}), kInvalid);
  }
  EXPECT_EQ(code({three[0], three[1], three[1]}), kInvalid);
  EXPECT_EQ(code({three[0], three[1], x.gpu.Reshape({8, 4}).value()}), kInvalid);
  EXPECT_EQ(code({three[0], three[1], Tensor()}), kInvalid);
  EXPECT_TRUE(gpu_->LinearPlanes(x.gpu, weight.gpu, nullptr, three).ok());
  EXPECT_EQ(
      cpu_->LinearPlanes(x.cpu, weight.cpu, nullptr, PlanesOf(Poisoned({3, 4, 4}).cpu)).code(),
      absl::StatusCode::kUnimplemented);
}

TEST_P(CudaParityTest, BadIndexValuesAreReportedBySynchronize) {
  // WriteRows: a position past the cache.
  const Pair src = F32({2, 1, 4}, Random(8));
  const Pair dst = F32({2, 10, 4}, Random(80));
  const Pair pos = I32({2}, {0, 99});
  ASSERT_TRUE(gpu_->WriteRows(src.gpu, pos.gpu, dst.gpu).ok());
  absl::Status status = gpu_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find("positions[1] = 99"), std::string::npos) << status;
  EXPECT_TRUE(gpu_->Synchronize().ok()) << "the error is reported once";

  // Embed: a token outside the table, reported by the download of its output.
  std::vector<float> table = Random(10 * 4);
  const Pair tt = Weight({10, 4}, table, DType::kF32);
  const Pair tok = I32({1, 2}, {3, 10});
  const Pair start = I32({1}, {0});
  const Pair y = Poisoned({1, 2, 4});
  ASSERT_TRUE(gpu_->Embed(tok.gpu, start.gpu, tt.gpu, tt.gpu, y.gpu).ok());
  auto download = Download<float>(*gpu_, y.gpu);
  EXPECT_EQ(download.status().code(), absl::StatusCode::kInvalidArgument) << download.status();
  EXPECT_NE(std::string(download.status().message()).find("token"), std::string::npos)
      << download.status();

  // Attention: a length outside [0, Tk].
  const Pair q = F32({1, 1, 8}, Random(8));
  const Pair kv = F32({1, 5, 8}, Random(40));
  const Pair len = I32({1}, {-1});
  const Pair out = Poisoned({1, 1, 8});
  ASSERT_TRUE(gpu_->Attention(q.gpu, kv.gpu, kv.gpu, &len.gpu, 2, 0.5f, true, out.gpu).ok());
  status = gpu_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find("kv_lengths[0] = -1"), std::string::npos) << status;
}

TEST_P(CudaParityTest, CaptureRefusesMemoryCallsAndValidatesArguments) {
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  EXPECT_EQ(gpu_->BeginCapture().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->Allocate({4}, DType::kF32).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  auto graph = gpu_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->num_nodes(), 0);
  EXPECT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(gpu_->EndCapture().status().code(), absl::StatusCode::kFailedPrecondition);

  // A CPU tensor given to the GPU backend names the device.
  const Pair x = F32({2, 3}, Random(6));
  const absl::Status status = gpu_->Add(x.cpu, x.gpu, x.gpu);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("lives on cpu"), std::string::npos) << status;
}

// A miniature decoder step (embed, projection, cache append, causal attention over the cache,
// log-softmax) captured once, replayed with new tokens and positions written between replays,
// against the CPU running the same calls eagerly.
TEST_P(CudaParityTest, GraphReplayReadsNewPositions) {
  const int64_t batch = 3, channels = 64, heads = 4, vocab = 50, capacity = 16;
  std::vector<float> table = Random(vocab * channels), position_table = Random(capacity * channels);
  std::vector<float> w = Random(channels * channels, -0.2f, 0.2f);
  const Pair tt = Weight({vocab, channels}, table, DType::kF16);
  const Pair pt = Weight({capacity, channels}, position_table, DType::kF32);
  const Pair weight = Weight({channels, channels}, w, DType::kF16);
  const Pair bias = F32({channels}, Random(channels));
  const Pair tokens = I32({batch, 1}, std::vector<int32_t>(batch, 0));
  const Pair positions = I32({batch}, std::vector<int32_t>(batch, 0));
  const Pair lengths = I32({batch}, std::vector<int32_t>(batch, 1));
  const Pair x = Poisoned({batch, 1, channels});
  const Pair k = Poisoned({batch, 1, channels});
  const Pair out = Poisoned({batch, 1, channels});
  const Pair cache = F32({batch, capacity, channels}, Random(batch * capacity * channels));

  auto step = [&](Backend& b, const Tensor Pair::*side) -> absl::Status {
    RETURN_IF_ERROR(b.Embed(tokens.*side, positions.*side, tt.*side, pt.*side, x.*side));
    RETURN_IF_ERROR(b.Linear(x.*side, weight.*side, &(bias.*side), Activation::kGelu, k.*side));
    RETURN_IF_ERROR(b.WriteRows(k.*side, positions.*side, cache.*side));
    RETURN_IF_ERROR(b.Attention(x.*side, cache.*side, cache.*side, &(lengths.*side),
                                static_cast<int>(heads), 0.25f, true, out.*side));
    return b.LogSoftmax(out.*side, out.*side);
  };

  for (int capture = 0; capture < 2; ++capture) {  // the second capture reuses the executable
    SCOPED_TRACE(absl::StrCat("capture ", capture));
    ASSERT_TRUE(gpu_->BeginCapture().ok());
    ASSERT_TRUE(step(*gpu_, &Pair::gpu).ok());
    auto graph = gpu_->EndCapture();
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ((*graph)->num_nodes(), 5);
    for (int s = 0; s < 5; ++s) {
      std::vector<int32_t> tok(batch), pos(batch), len(batch);
      for (int64_t b = 0; b < batch; ++b) {
        tok[b] = RandomInt(0, vocab - 1);
        pos[b] = RandomInt(0, capacity - 1);
        len[b] = pos[b] + 1;
      }
      for (Backend* b : {cpu_.get(), gpu_.get()}) {
        const bool is_gpu = b == gpu_.get();
        ASSERT_TRUE(b->CopyFromHost(tok.data(), batch * 4, is_gpu ? tokens.gpu : tokens.cpu).ok());
        ASSERT_TRUE(
            b->CopyFromHost(pos.data(), batch * 4, is_gpu ? positions.gpu : positions.cpu).ok());
        ASSERT_TRUE(
            b->CopyFromHost(len.data(), batch * 4, is_gpu ? lengths.gpu : lengths.cpu).ok());
      }
      ASSERT_TRUE(step(*cpu_, &Pair::cpu).ok());
      ASSERT_TRUE((*graph)->Replay().ok());
      EXPECT_TRUE(Close(absl::StrCat("graph replay ", capture, ".", s), Gpu(out.gpu), Cpu(out.cpu),
                        kExact));
    }
    EXPECT_TRUE(Close(absl::StrCat("cache after replays ", capture), Gpu(cache.gpu), Cpu(cache.cpu),
                      kExact));
  }
}

// Launch hints change how kernels launch (on CUDA: with PDL or not), never what they compute:
// eager and captured under each hint in turn (the later captures have the signature of the
// first, so the executable cache is exercised across hints), on fresh poisoned outputs.
TEST_P(CudaParityTest, LaunchHintsKeepResults) {
  const int64_t m = 300, k = 64, n = 96;
  const Pair x = F32({m, k}, Random(m * k));
  std::vector<float> w = Random(n * k, -0.2f, 0.2f);
  const Pair weight = Weight({n, k}, w, DType::kF16);
  const Pair bias = F32({n}, Random(n));
  const Pair gamma = F32({k}, Random(k, 0.5f, 1.5f));
  const Pair beta = F32({k}, Random(k));
  auto chain = [&](Backend& b, const Tensor Pair::*side, const Pair& h,
                   const Pair& y) -> absl::Status {
    RETURN_IF_ERROR(b.LayerNorm(x.*side, gamma.*side, beta.*side, 1e-5f, h.*side));
    return b.Linear(h.*side, weight.*side, &(bias.*side), Activation::kGelu, y.*side);
  };
  const Pair h0 = Poisoned({m, k}), y0 = Poisoned({m, n});
  ASSERT_TRUE(chain(*cpu_, &Pair::cpu, h0, y0).ok());
  cpu_->SetLaunchHint(Backend::LaunchHint::kLargeKernels);  // ignored by the CPU backend
  const std::vector<float> want = Cpu(y0.cpu);
  using Hint = Backend::LaunchHint;
  int run = 0;
  for (const Hint hint : {Hint::kLargeKernels, Hint::kDefault, Hint::kLargeKernels}) {
    for (const bool capture : {false, true}) {
      const std::string what =
          absl::StrCat("run ", run++, hint == Hint::kDefault ? " default" : " large kernels",
                       capture ? ", graph" : ", eager");
      SCOPED_TRACE(what);
      const Pair h = Poisoned({m, k}), y = Poisoned({m, n});
      gpu_->SetLaunchHint(hint);
      if (capture) {
        ASSERT_TRUE(gpu_->BeginCapture().ok());
        const absl::Status recorded = chain(*gpu_, &Pair::gpu, h, y);
        auto graph = gpu_->EndCapture();
        ASSERT_TRUE(recorded.ok()) << recorded;
        ASSERT_TRUE(graph.ok()) << graph.status();
        gpu_->SetLaunchHint(Hint::kDefault);  // replays keep the hint they were captured under
        ASSERT_TRUE((*graph)->Replay().ok());
      } else {
        ASSERT_TRUE(chain(*gpu_, &Pair::gpu, h, y).ok());
      }
      EXPECT_TRUE(Close(what, Gpu(y.gpu), want, GemmTolerance(m, DType::kF16)));
    }
  }
  gpu_->SetLaunchHint(Hint::kDefault);
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaParityTest, ::testing::ValuesIn(kVariants), VariantName);

}  // namespace
}  // namespace waav
