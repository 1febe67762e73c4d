#include "kernels/cuda/gemm.h"

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "spdlog/spdlog.h"

namespace waav::cuda {
namespace {

absl::Status LaunchStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

[[maybe_unused]] size_t RoundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

absl::StatusOr<std::string> LoadBlas(bool use_cublas, size_t workspace_bytes,
                                     const std::shared_ptr<DevicePool>& pool, cudaStream_t stream,
                                     Tensor* workspace, std::unique_ptr<Blas>* blas) {
  std::string gemm = "built-in tiled kernel";
#if !defined(WAAV_HIP)
  if (use_cublas) {
    const int64_t words = static_cast<int64_t>((workspace_bytes + 3) / 4);
    ASSIGN_OR_RETURN(*workspace, AllocateDeviceTensor(pool, Shape{words}, DType::kF32));
    auto loaded = Blas::Load(stream, workspace->data(), workspace->size_bytes());
    if (loaded.ok()) {
      *blas = std::move(*loaded);
      gemm = absl::StrCat("cuBLAS (", (*blas)->library(), ")");
    } else {
      spdlog::warn("cuda backend: {}; large GEMMs use the slower built-in kernel",
                   std::string(loaded.status().message()));
      gemm = absl::StrCat("built-in tiled kernel (", loaded.status().message(), ")");
    }
  }
#else
  (void)use_cublas;
  (void)workspace_bytes;
  (void)pool;
  (void)stream;
  (void)workspace;
  (void)blas;
#endif
  return gemm;
}

bool GemmAccumulates(GemmPath path) {
  return path == GemmPath::kBlasF32 || path == GemmPath::kBlasTf32 || path == GemmPath::kBlasHalf ||
         path == GemmPath::kBlasHalfSplit;
}

GemmPlan PlanGemm(const GemmConfig& config, int64_t m, int64_t n, int64_t k, bool w_f16,
                  bool half_gemm_ok, bool conv) {
  GemmPlan plan;
  if (m == 0 || n == 0) return plan;
  if (k == 0) {
    plan.path = GemmPath::kBiasOnly;
    return plan;
  }
  if (m <= config.skinny_max_rows) {
    plan.path = GemmPath::kSkinny;
    return plan;
  }
  if (w_f16 && half_gemm_ok && config.use_half_gemm && config.math == CudaMath::kFast) {
    plan.path = GemmPath::kHalfMma;
    if (!conv && config.half_gemm_counters != nullptr) {
      plan.half_splits = HalfGemmSplits(m, n, k, config.half_gemm_narrow_tiles, config.sm_count,
                                        config.half_gemm_split_k_waves);
      plan.scratch_bytes = HalfGemmSplitBytes(m, n, plan.half_splits);
    }
    return plan;
  }
#if !defined(WAAV_HIP)
  if (config.blas != nullptr) {
    const size_t half_bytes = RoundUp256(static_cast<size_t>(m * k) * 2);
    if (!w_f16) {
      plan.path = config.math == CudaMath::kFast ? GemmPath::kBlasTf32 : GemmPath::kBlasF32;
    } else if (config.math == CudaMath::kFast) {
      plan.path = GemmPath::kBlasHalf;
      plan.scratch_bytes = half_bytes;
    } else {
      plan.path = GemmPath::kBlasHalfSplit;
      plan.scratch_bytes = 2 * half_bytes;
    }
    return plan;
  }
#endif
  plan.path = GemmPath::kTiled;
  return plan;
}

absl::Status RunGemm(const GemmConfig& config, const LaunchContext& ctx, const GemmPlan& plan,
                     const GemmProblem& p, void* scratch) {
  switch (plan.path) {
    case GemmPath::kNothing:
      return absl::OkStatus();
    case GemmPath::kBiasOnly:
      return LaunchStatus("Linear epilogue",
                          LaunchEpilogue(ctx, p.y, p.m, p.n, p.bias, p.act, /*zero_input=*/true));
    case GemmPath::kSkinny:
      return LaunchStatus(
          "Linear", LaunchSkinnyLinear(ctx, p.x, p.m, p.k, p.w, p.w_f16, p.n, p.bias, p.act, p.y));
    case GemmPath::kTiled:
      return LaunchStatus(
          "Linear", LaunchTiledLinear(ctx, p.x, p.m, p.k, p.w, p.w_f16, p.n, p.bias, p.act, p.y));
    case GemmPath::kHalfMma: {
      HalfGemmArgs args{p.x, p.w, p.bias, p.y, p.m, p.n, p.k, p.act, p.conv};
      args.residual = p.residual;
      args.narrow_tiles = config.half_gemm_narrow_tiles;
      args.planes = p.planes;
      args.plane_cols = p.plane_cols;
      if (plan.half_splits > 1 && scratch != nullptr) {
        args.splits = plan.half_splits;
        args.partials = static_cast<float*>(scratch);
        args.counters = config.half_gemm_counters;
      }
      return LaunchStatus("Linear", LaunchHalfGemm(ctx, args));
    }
    default:
      break;
  }
#if defined(WAAV_HIP)
  return absl::InternalError("Linear: no BLAS in the HIP build");
#else
  const Blas& blas = *config.blas;
  const cudaDataType w_type = p.w_f16 ? CUDA_R_16F : CUDA_R_32F;
  if (p.y_half != nullptr) {
    if (!GemmStoresHalf(plan.path) || !p.x_f16 || p.accumulate) {
      return absl::InternalError("Linear: an f16 result needs f16 x on a cuBLAS f16 path");
    }
    bool bias_done = false;
    if (p.bias_half != nullptr && p.act == Epilogue::kNone && config.blas_bias_epilogue) {
      ASSIGN_OR_RETURN(bias_done,
                       blas.GemmBias(p.m, p.n, p.k, p.x, CUDA_R_16F, p.w, w_type, 0.0f, p.y_half,
                                     p.bias_half, CUBLAS_COMPUTE_32F, CUDA_R_16F));
    }
    if (!bias_done) {
      RETURN_IF_ERROR(blas.Gemm(p.m, p.n, p.k, p.x, CUDA_R_16F, p.w, w_type, 0.0f, p.y_half,
                                CUBLAS_COMPUTE_32F, CUDA_R_16F));
    }
    if (bias_done || (p.bias == nullptr && p.act == Epilogue::kNone)) return absl::OkStatus();
    return LaunchStatus("Linear epilogue",
                        LaunchEpilogueHalfInPlace(ctx, p.y_half, p.m, p.n, p.bias, p.act));
  }
  const float beta = p.accumulate ? 1.0f : 0.0f;
  // The bias in the (last) GEMM's own epilogue where cuBLASLt offers it; otherwise, and with an
  // activation, the epilogue kernel after the GEMM.
  const float* fused_bias =
      config.blas_bias_epilogue && p.bias != nullptr && p.act == Epilogue::kNone ? p.bias : nullptr;
  bool bias_done = false;
  auto gemm = [&](const void* x, cudaDataType x_type, float gemm_beta, cublasComputeType_t compute,
                  bool last) -> absl::Status {
    if (last && fused_bias != nullptr) {
      ASSIGN_OR_RETURN(bias_done, blas.GemmBias(p.m, p.n, p.k, x, x_type, p.w, w_type, gemm_beta,
                                                p.y, fused_bias, compute));
      if (bias_done) return absl::OkStatus();
    }
    return blas.Gemm(p.m, p.n, p.k, x, x_type, p.w, w_type, gemm_beta, p.y, compute);
  };
  switch (plan.path) {
    case GemmPath::kBlasF32:
      RETURN_IF_ERROR(gemm(p.x, CUDA_R_32F, beta, CUBLAS_COMPUTE_32F, true));
      break;
    case GemmPath::kBlasTf32:
      RETURN_IF_ERROR(gemm(p.x, CUDA_R_32F, beta, CUBLAS_COMPUTE_32F_FAST_TF32, true));
      break;
    case GemmPath::kBlasHalf:
    case GemmPath::kBlasHalfSplit:
      if (p.x_f16) {
        RETURN_IF_ERROR(gemm(p.x, CUDA_R_16F, beta, CUBLAS_COMPUTE_32F, true));
        break;
      }
      if (plan.path == GemmPath::kBlasHalfSplit) {
        void* hi = scratch;
        void* lo = static_cast<char*>(scratch) + RoundUp256(static_cast<size_t>(p.m * p.k) * 2);
        RETURN_IF_ERROR(
            LaunchStatus("Linear f16 split", LaunchSplitHalf(ctx, p.x, p.m * p.k, hi, lo)));
        RETURN_IF_ERROR(gemm(hi, CUDA_R_16F, beta, CUBLAS_COMPUTE_32F, false));
        RETURN_IF_ERROR(gemm(lo, CUDA_R_16F, 1.0f, CUBLAS_COMPUTE_32F, true));
        break;
      }
      RETURN_IF_ERROR(LaunchStatus("Linear f16 input", LaunchToHalf(ctx, p.x, p.m * p.k, scratch)));
      RETURN_IF_ERROR(gemm(scratch, CUDA_R_16F, beta, CUBLAS_COMPUTE_32F, true));
      break;
    default:
      return absl::InternalError("Linear: unknown GEMM path");
  }
  if (bias_done || (p.bias == nullptr && p.act == Epilogue::kNone)) return absl::OkStatus();
  return LaunchStatus("Linear epilogue",
                      LaunchEpilogue(ctx, p.y, p.m, p.n, p.bias, p.act, /*zero_input=*/false));
#endif
}

size_t HalfOutputBias16Bytes(int64_t n, bool bias, Epilogue act) {
  return bias && act == Epilogue::kNone ? RoundUp256(static_cast<size_t>(n) * 2) : 0;
}

absl::Status RunGemmHalfOutput(const GemmConfig& config, const LaunchContext& ctx,
                               const GemmPlan& plan, const void* x, int64_t m, int64_t k,
                               const void* w, bool w_f16, const float* bias, Epilogue act,
                               const HalfOutput& out, void* scratch) {
  const int64_t n = out.plane_cols * out.count;
  // (bias16 is scratch for a bias without activation only: HalfOutputBias16Bytes.)
  auto* bias16 =
      bias != nullptr && act == Epilogue::kNone ? static_cast<char*>(out.bias16) : nullptr;
  if (bias16 != nullptr) {
    RETURN_IF_ERROR(LaunchStatus("Linear f16 bias", LaunchToHalf(ctx, bias, n, bias16)));
  }
  const size_t w_bytes = w_f16 ? 2 : 4;
  for (int p = 0; p < out.count; ++p) {
    const int64_t first = p * out.plane_cols;
    GemmProblem g{static_cast<const float*>(x),  // (f16 values: x_f16)
                  m,
                  k,
                  static_cast<const char*>(w) + static_cast<size_t>(first * k) * w_bytes,
                  w_f16,
                  out.plane_cols,
                  bias != nullptr ? bias + first : nullptr,
                  act,
                  nullptr};
    g.x_f16 = true;
    g.y_half = out.planes[p];
    g.bias_half = bias16 != nullptr ? bias16 + first * 2 : nullptr;
    RETURN_IF_ERROR(RunGemm(config, ctx, plan, g, scratch));
  }
  return absl::OkStatus();
}

}  // namespace waav::cuda
