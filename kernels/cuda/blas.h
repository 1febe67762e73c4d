// cuBLAS, loaded at run time with dlopen so that binaries linked with the CUDA backend start
// (and fall back to the CPU) on machines without the CUDA libraries. Only the handful of entry
// points the GEMM dispatch uses are resolved.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/gpu.h"

#if !defined(WAAV_HIP)
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

namespace waav::cuda {

#if !defined(WAAV_HIP)

class Blas {
 public:
  // Loads libcublas (the major version this was compiled against first, then the unversioned
  // name), creates a handle bound to `stream` with `workspace_bytes` of `workspace` (set
  // explicitly so that cuBLAS never allocates while a graph is being captured).
  static absl::StatusOr<std::unique_ptr<Blas>> Load(cudaStream_t stream, void* workspace,
                                                    size_t workspace_bytes);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Row-major y[M, N] = x[M, K] · w[N, K]ᵀ (+ beta·y). x and w are f32 or f16 (`*_type`); y is
  // f32, or f16 (`y_type`: the f32 sums rounded to nearest as they are stored).
  absl::Status Gemm(int64_t m, int64_t n, int64_t k, const void* x, cudaDataType x_type,
                    const void* w, cudaDataType w_type, float beta, void* y,
                    cublasComputeType_t compute, cudaDataType y_type = CUDA_R_32F) const;

  // The same plus bias[N] on every row, added by cuBLASLt's epilogue in the GEMM's own kernel
  // (after beta·y: y = x·wᵀ + beta·y + bias, summed in f32, then stored as y_type). The bias has
  // y's type (cuBLASLt's rule: an f16 y takes an f16 bias). Returns false, having done nothing,
  // where that is not on offer (no cuBLASLt, a bias not 16-byte aligned, no algorithm for the
  // shape): the caller then runs Gemm and adds the bias itself.
  absl::StatusOr<bool> GemmBias(int64_t m, int64_t n, int64_t k, const void* x, cudaDataType x_type,
                                const void* w, cudaDataType w_type, float beta, void* y,
                                const void* bias, cublasComputeType_t compute,
                                cudaDataType y_type = CUDA_R_32F) const;

  // Where the library was loaded from (for Describe()); with cuBLASLt's name where it loaded.
  const std::string& library() const { return library_; }

 private:
  Blas() = default;

  using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
  using DestroyFn = cublasStatus_t (*)(cublasHandle_t);
  using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  using SetWorkspaceFn = cublasStatus_t (*)(cublasHandle_t, void*, size_t);
  using SetMathModeFn = cublasStatus_t (*)(cublasHandle_t, cublasMath_t);
  using StatusStringFn = const char* (*)(cublasStatus_t);
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

  // cuBLASLt's entry points (declared types from cublasLt.h, so a mismatch fails to compile).
  struct LtApi {
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
  };

  // One shape's descriptors and chosen algorithm (found = false: none, fall back).
  struct LtPlan {
    bool found = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // (m, n, k, x type, w type, compute, beta != 0, alignment of x, w, y, y type).
  using LtKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, bool, int, int, int, int>;

  // Loads cuBLASLt beside cuBLAS; leaves lt_handle_ null where it is missing.
  void LoadLt();
  // The shape's plan, made on first use (without an algorithm where any cuBLASLt call failed).
  const LtPlan& PlanLt(const LtKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lt_mutex_);

  void* library_handle_ = nullptr;
  std::string library_;
  cublasHandle_t handle_ = nullptr;
  DestroyFn destroy_ = nullptr;
  StatusStringFn status_string_ = nullptr;
  GemmExFn gemm_ex_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  LtApi lt_;
  cublasLtHandle_t lt_handle_ = nullptr;
  mutable absl::Mutex lt_mutex_;
  mutable std::map<LtKey, LtPlan> lt_plans_ ABSL_GUARDED_BY(lt_mutex_);
};

#else

// The HIP build has no BLAS yet: the GEMM dispatch uses the backend's own tiled kernel.
class Blas {
 public:
  const std::string& library() const { return library_; }

 private:
  std::string library_;
};

#endif

}  // namespace waav::cuda
