// Dispatch of the GEMMs behind Linear and Conv1d: y[M, N] = act(x[M, K] · w[N, K]ᵀ + bias).
// Planning (path and scratch size) happens when the op is submitted, so that scratch memory can
// be allocated then and owned by the op (and by a graph that captures it); running happens when
// the op's kernels are issued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/half_gemm.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/memory_pool.h"

namespace waav::cuda {

struct GemmConfig {
  const Blas* blas = nullptr;  // null: no cuBLAS
  CudaMath math = CudaMath::kFast;
  int skinny_max_rows = 16;
  bool use_half_gemm = false;          // kFast, f16 weights, many rows: HalfGemm (half_gemm.cuh)
  bool half_gemm_narrow_tiles = true;  // HalfGemmArgs::narrow_tiles
  // HalfGemm's split K (HalfGemmSplits): grids of at least this many blocks per multiprocessor
  // (0: never split), the device's multiprocessors, kHalfGemmSplitCounters zeroed ints.
  int half_gemm_split_k_waves = 0;
  int sm_count = 0;
  int* half_gemm_counters = nullptr;
  // cuBLAS paths: a bias without activation added by cuBLASLt's epilogue in the GEMM's kernel
  // (Blas::GemmBias) instead of the epilogue kernel after it.
  bool blas_bias_epilogue = true;
};

enum class GemmPath : uint8_t {
  kNothing,        // M or N is 0
  kBiasOnly,       // K is 0: y = act(bias)
  kSkinny,         // our memory-bound kernel, exact f32
  kTiled,          // our tiled kernel, exact f32 (no cuBLAS)
  kBlasF32,        // cuBLAS, f32 weights, no TF32
  kBlasTf32,       // cuBLAS, f32 weights, TF32 tensor cores
  kBlasHalf,       // cuBLAS, f16 weights, x rounded to f16
  kBlasHalfSplit,  // cuBLAS, f16 weights, x as hi + lo f16 (two GEMMs)
  kHalfMma,        // HalfGemm: x rounded to f16 as it is loaded, bias/activation fused, 1 kernel
};

struct GemmPlan {
  GemmPath path = GemmPath::kNothing;
  size_t scratch_bytes = 0;
  int half_splits = 1;  // kHalfMma: K ranges (their partial sums in the scratch)
};

struct GemmProblem {
  const float* x;
  int64_t m, k;
  const void* w;
  bool w_f16;
  int64_t n;
  const float* bias;  // may be null
  Epilogue act;
  float* y;
  const ConvGather* conv = nullptr;  // kHalfMma only: x is a Conv1d input gathered as im2col
  const float* residual = nullptr;   // kHalfMma only: y = residual + act(...), may be y
  // cuBLAS paths only (act kNone): y += x·wᵀ + bias (the GEMM with beta = 1, then the bias).
  bool accumulate = false;
  // kBlasHalf and kBlasHalfSplit only: x holds f16 values, read by the GEMM as they are (no
  // conversion pass; for the split path x's low half is zero, so one GEMM).
  bool x_f16 = false;
  // kHalfMma only: the result written as f32 planes of plane_cols columns (LinearPlanes), not y.
  const PlaneOutputs* planes = nullptr;
  int64_t plane_cols = 0;
  // kBlasHalf and kBlasHalfSplit with x_f16 only (not accumulate): the result rounded to f16 by
  // cuBLAS as it stores, into y_half instead of y (no f32 result and no conversion pass). The
  // bias: with bias_half (the same values in f16, cuBLASLt's rule for an f16 output) and no
  // activation, in cuBLASLt's epilogue; otherwise bias and activation by one in-place pass over
  // y_half (LaunchEpilogueHalfInPlace: the sums are rounded twice, as the GEMM stores them and
  // after the bias and activation).
  void* y_half = nullptr;
  const void* bias_half = nullptr;
};

// cuBLAS for a backend (CudaBackendOptions::use_cublas) with its workspace, allocated from `pool`
// into `workspace`: the GEMMs' description for Backend::Describe ("cuBLAS (libcublas.so.13)"), or,
// where cuBLAS does not load (a warning is logged) or in a HIP build, the built-in kernel's.
absl::StatusOr<std::string> LoadBlas(bool use_cublas, size_t workspace_bytes,
                                     const std::shared_ptr<DevicePool>& pool, cudaStream_t stream,
                                     Tensor* workspace, std::unique_ptr<Blas>* blas);

// Whether `path` can add into y (GemmProblem::accumulate).
bool GemmAccumulates(GemmPath path);
// Whether `path` can store an f16 result itself (GemmProblem::y_half, x_f16).
inline bool GemmStoresHalf(GemmPath path) {
  return path == GemmPath::kBlasHalf || path == GemmPath::kBlasHalfSplit;
}

// `half_gemm_ok`: HalfGemmSupported() for the problem's shapes and addresses; `conv`: a Conv1d's
// implicit GEMM (never split along K).
GemmPlan PlanGemm(const GemmConfig& config, int64_t m, int64_t n, int64_t k, bool w_f16,
                  bool half_gemm_ok = false, bool conv = false);
// f16 results of an f16 x on a path that stores them (GemmStoresHalf; GemmProblem::y_half):
// the n output columns of x·wᵀ + bias, act applied, in `count` planes of plane_cols = n / count
// columns (plane p: columns [p·plane_cols, (p + 1)·plane_cols), stored [m, plane_cols] at
// planes[p]; one plane: a Linear's y), one GEMM each. Without an activation the bias is first
// rounded into `bias16` (HalfOutputBias16Bytes of scratch, 16-byte aligned) for cuBLASLt's
// epilogue. `scratch` holds plan.scratch_bytes (null when 0).
struct HalfOutput {
  void* const* planes;
  int count;
  int64_t plane_cols;
  void* bias16;
};
size_t HalfOutputBias16Bytes(int64_t n, bool bias, Epilogue act);
absl::Status RunGemmHalfOutput(const GemmConfig& config, const LaunchContext& ctx,
                               const GemmPlan& plan, const void* x, int64_t m, int64_t k,
                               const void* w, bool w_f16, const float* bias, Epilogue act,
                               const HalfOutput& out, void* scratch);

// `scratch` holds plan.scratch_bytes (null when 0).
absl::Status RunGemm(const GemmConfig& config, const LaunchContext& ctx, const GemmPlan& plan,
                     const GemmProblem& p, void* scratch);

}  // namespace waav::cuda
