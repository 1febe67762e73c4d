// The CUDA parity fixture shared by cuda_backend_test.cc (kernels) and
// cuda_whisper_parity_test.cc (whole Whisper passes): tolerances (see cuda_backend_test.cc),
// the comparison, the backend variants and CudaParityTest, which pairs a CUDA backend of one
// variant with the CPU backend (the reference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/backend_registry.h"
#include "engine/runtime/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/random_whisper.h"
#include "tests/support/test_env.h"

namespace waav {

constexpr double kExact = 1e-5;
constexpr double kAccurateGemm = 2e-5;
constexpr double kFastGemm = 3e-3;
constexpr double kFastAttention = 3e-3;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

// Relative L2 error of `got` against `want`, failing on any non-finite value or size mismatch.
inline ::testing::AssertionResult Close(const std::string& what, const std::vector<float>& got,
                                        const std::vector<float>& want, double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      return ::testing::AssertionFailure()
             << what << ": element " << i << " is " << got[i] << " (cpu " << want[i] << ")";
    }
    if (std::isnan(want[i])) continue;
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  std::cout << "parity: " << what << ": relative L2 error " << rel << " (tolerance " << tolerance
            << ")\n";
  if (rel <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": relative L2 error " << rel << " > " << tolerance;
}

// ---- Kernel parity
// --------------------------------------------------------------------------------

struct Variant {
  const char* name;
  CudaMath math;
  bool cublas;
  bool graphs;
  bool half_gemm = false;         // CudaBackendOptions::use_half_gemm
  bool flash_v2 = true;           // CudaBackendOptions::use_flash_v2
  bool residual = false;          // CudaBackendOptions::linear_residual
  int64_t half_gemm_max = 0;      // CudaBackendOptions::half_gemm_max_k and _max_n; > 0: no convs
  bool half_activations = false;  // CudaBackendOptions::half_activations
  bool planes = false;            // CudaBackendOptions::linear_planes
  bool defaults = false;  // CudaBackendOptions' defaults for all of the above (variant "Fast")
  bool encoder_no_pdl = false;    // CudaBackendOptions::pdl_large_kernels false (with defaults too)
  bool decode_attention = false;  // CudaBackendOptions::decode_attention on (with defaults too)
  bool f32_gemm_output = false;   // CudaBackendOptions::blas_half_output off (with defaults too)
  int flash_m_tiles = 0;          // > 0: CudaBackendOptions::flash_m_tiles (with defaults too)
};

inline void PrintTo(const Variant& variant, std::ostream* os) { *os << variant.name; }

class CudaParityTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    CudaBackendOptions options;
    options.math = GetParam().math;
    options.use_cublas = GetParam().cublas;
    options.use_graphs = GetParam().graphs;
    if (!GetParam().defaults) {
      options.use_half_gemm = GetParam().half_gemm;
      options.use_flash_v2 = GetParam().flash_v2;
      options.linear_residual = GetParam().residual;
      options.half_gemm_max_k = options.half_gemm_max_n = GetParam().half_gemm_max;
      options.half_gemm_conv = GetParam().half_gemm_max == 0;
      options.half_activations = GetParam().half_activations;
      options.linear_planes = GetParam().planes;
      options.half_gemm_min_rows = 0;  // HalfGemm's few-row GEMMs stay covered
    }
    if (GetParam().encoder_no_pdl) options.pdl_large_kernels = false;
    if (GetParam().decode_attention) options.decode_attention = true;
    if (GetParam().f32_gemm_output) options.blas_half_output = false;
    if (GetParam().flash_m_tiles > 0) options.flash_m_tiles = GetParam().flash_m_tiles;
    half_activations_ = options.half_activations;
    skinny_max_rows_ = options.skinny_max_rows;
    auto gpu = CreateCudaBackend(options);
    if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << gpu.status().message();
    gpu_ = std::move(*gpu);
    cpu_ = CreateCpuBackend({});
    blas_ = gpu_->Describe().find("cuBLAS") != std::string::npos;
  }
  void TearDown() override {
    if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
  }

  struct Pair {
    Tensor cpu, gpu;
  };

  std::vector<float> Random(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng_);
    return v;
  }
  int RandomInt(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Pair Make(const Shape& shape, DType dtype, const void* data) {
    auto c = Upload(*cpu_, shape, dtype, data);
    auto g = Upload(*gpu_, shape, dtype, data);
    EXPECT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(g.ok()) << g.status();
    return {c.ok() ? *c : Tensor(), g.ok() ? *g : Tensor()};
  }
  Pair F32(const Shape& shape, const std::vector<float>& v) {
    return Make(shape, DType::kF32, v.data());
  }
  Pair I32(const Shape& shape, const std::vector<int32_t>& v) {
    return Make(shape, DType::kI32, v.data());
  }
  // Weights of `dtype`; f16 values are rounded in place so both backends read the same numbers.
  Pair Weight(const Shape& shape, std::vector<float>& v, DType dtype) {
    if (dtype == DType::kF32) return F32(shape, v);
    std::vector<uint16_t> half(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      half[i] = FloatToHalf(v[i]);
      v[i] = HalfToFloat(half[i]);
    }
    return Make(shape, DType::kF16, half.data());
  }
  Pair Poisoned(const Shape& shape) {
    return F32(shape, std::vector<float>(static_cast<size_t>(shape.numel()), kNaN));
  }
  std::vector<float> Cpu(const Tensor& t) {
    auto v = Download<float>(*cpu_, t);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>();
  }
  std::vector<float> Gpu(const Tensor& t) {
    auto v = Download<float>(*gpu_, t);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>();
  }

  // Tolerance of a GEMM of m rows with weights of `w` on this variant.
  double GemmTolerance(int64_t m, DType w) const {
    if (m <= skinny_max_rows_) return kExact;
    if (GetParam().math == CudaMath::kFast) {
      const bool half_gemm = GetParam().half_gemm && w == DType::kF16;
      return blas_ || half_gemm ? kFastGemm : kExact;
    }
    return blas_ ? kAccurateGemm : kExact;
  }
  bool fast() const { return GetParam().math == CudaMath::kFast; }

  // f16 activations: `v` rounded to f16 in place (both backends see the same values) and the
  // GPU tensor holding them; an f16 GPU tensor poisoned with NaN; an f16 GPU tensor widened.
  Tensor HalfGpu(const Shape& shape, std::vector<float>& v) {
    std::vector<uint16_t> half(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      half[i] = FloatToHalf(v[i]);
      v[i] = HalfToFloat(half[i]);
    }
    auto t = Upload(*gpu_, shape, DType::kF16, half.data());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : Tensor();
  }
  Tensor PoisonedHalf(const Shape& shape) {
    std::vector<uint16_t> nan(static_cast<size_t>(shape.numel()), 0x7e00);
    auto t = Upload(*gpu_, shape, DType::kF16, nan.data());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : Tensor();
  }
  std::vector<float> GpuHalf(const Tensor& t) {
    auto v = Download<uint16_t>(*gpu_, t);
    EXPECT_TRUE(v.ok()) << v.status();
    std::vector<float> out;
    if (v.ok()) {
      for (uint16_t h : *v) out.push_back(HalfToFloat(h));
    }
    return out;
  }

  uint32_t seed_ = 0;
  bool half_activations_ = false;
  int64_t skinny_max_rows_ = 16;  // CudaBackendOptions::skinny_max_rows of gpu_
  std::mt19937 rng_;
  std::unique_ptr<Backend> gpu_, cpu_;
  bool blas_ = false;
};

const Variant kVariants[] = {
    {"Accurate", CudaMath::kAccurate, true, true},
    // CudaBackendOptions' defaults: HalfGemm for N, K <= 384 with residuals fused, cuBLAS
    // (beta = 1) for the rest, flash v2, f16 FFN activations.
    {.name = "Fast", .math = CudaMath::kFast, .cublas = true, .graphs = true, .defaults = true},
    // The defaults with the encoder's kernels launched without PDL.
    {.name = "FastEncoderNoPdl",
     .math = CudaMath::kFast,
     .cublas = true,
     .graphs = true,
     .defaults = true,
     .encoder_no_pdl = true},
    // The defaults with the decoder's one-query attention by DecodeAttention.
    {.name = "FastDecodeAttention",
     .math = CudaMath::kFast,
     .cublas = true,
     .graphs = true,
     .defaults = true,
     .decode_attention = true},
    // The defaults with cuBLAS's f16 results stored in f32 and rounded by an epilogue pass.
    {.name = "FastF32GemmOutput",
     .math = CudaMath::kFast,
     .cublas = true,
     .graphs = true,
     .defaults = true,
     .f32_gemm_output = true},
    // The defaults with Flash v2's warps over two m-tiles (128 queries a block) and one.
    {.name = "FastFlashTwoMTiles",
     .math = CudaMath::kFast,
     .cublas = true,
     .graphs = true,
     .defaults = true,
     .flash_m_tiles = 2},
    {.name = "FastFlashOneMTile",
     .math = CudaMath::kFast,
     .cublas = true,
     .graphs = true,
     .defaults = true,
     .flash_m_tiles = 1},
    // The built-in GEMM (f16 activations widened for it).
    {.name = "AccurateBuiltinGemmEagerGraphs",
     .math = CudaMath::kAccurate,
     .cublas = false,
     .graphs = false,
     .half_activations = true},
    // The first encoder kernels: conversion + cuBLAS + epilogue, flash v1, separate Adds.
    {"FastFirstKernels", CudaMath::kFast, true, true, false, false, false},
    // HalfGemm for every many-row f16 GEMM, residuals in its epilogue.
    {"FastHalfGemm", CudaMath::kFast, true, true, true, true, true},
    // cuBLAS GEMMs adding the residuals (beta = 1), with and without f16 FFN activations.
    {"FastCublasResidual", CudaMath::kFast, true, true, false, true, true},
    {"FastCublasResidualHalfActivations", CudaMath::kFast, true, true, false, true, true, 0, true},
    // HalfGemm only for N, K <= 384 (Q, K, V, output projection), cuBLAS (beta = 1) elsewhere.
    {"FastHalfGemmSmall", CudaMath::kFast, true, true, true, true, true, 384},
    // The round 2 defaults: as Fast but Q, K, V in three GEMMs with f32 activations.
    {"FastHalfGemmSmallHalfActivations", CudaMath::kFast, true, true, true, true, true, 384, true},
    // Q, K, V planes with the built-in GEMM and f32 attention inputs (no f16 activations).
    {.name = "AccuratePlanes",
     .math = CudaMath::kAccurate,
     .cublas = true,
     .graphs = true,
     .residual = true,
     .planes = true},
};
inline std::string VariantName(const ::testing::TestParamInfo<Variant>& info) {
  return info.param.name;
}

}  // namespace waav
