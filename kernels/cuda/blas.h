// cuBLAS, loaded at run time with dlopen so that binaries linked with the CUDA backend start
// (and fall back to the CPU) on machines without the CUDA libraries. Only the handful of entry
// points the GEMM dispatch uses are resolved.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/cuda/gpu.h"

#if !defined(WAAV_HIP)
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

  // Row-major y[M, N] = x[M, K] · w[N, K]ᵀ (+ beta·y). x and w are f32 or f16 (`*_type`), y f32.
  absl::Status Gemm(int64_t m, int64_t n, int64_t k, const void* x, cudaDataType x_type,
                    const void* w, cudaDataType w_type, float beta, float* y,
                    cublasComputeType_t compute) const;

  // Where the library was loaded from (for Describe()).
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

  void* library_handle_ = nullptr;
  std::string library_;
  cublasHandle_t handle_ = nullptr;
  DestroyFn destroy_ = nullptr;
  StatusStringFn status_string_ = nullptr;
  GemmExFn gemm_ex_ = nullptr;
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
