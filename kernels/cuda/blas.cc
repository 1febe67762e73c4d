#include "kernels/cuda/blas.h"

#if !defined(WAAV_HIP)

#include <dlfcn.h>

#include <climits>

#include "absl/strings/str_cat.h"

namespace waav::cuda {
namespace {

template <typename Fn>
absl::Status Resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (*fn == nullptr) {
    return absl::UnavailableError(absl::StrCat("cuBLAS has no symbol ", name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Blas>> Blas::Load(cudaStream_t stream, void* workspace,
                                                 size_t workspace_bytes) {
  const std::string versioned = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  std::string errors;
  void* library = nullptr;
  std::string loaded;
  for (const std::string& name : {versioned, std::string("libcublas.so")}) {
    library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      loaded = name;
      break;
    }
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", dlerror());
  }
  if (library == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot load cuBLAS (", errors, ")"));
  }
  auto blas = std::unique_ptr<Blas>(new Blas());
  blas->library_handle_ = library;
  blas->library_ = loaded;
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  SetWorkspaceFn set_workspace = nullptr;
  SetMathModeFn set_math_mode = nullptr;
  // The _v2 names are what cublas_v2.h maps the plain names to.
  for (absl::Status s : {Resolve(library, "cublasCreate_v2", &create),
                         Resolve(library, "cublasDestroy_v2", &blas->destroy_),
                         Resolve(library, "cublasSetStream_v2", &set_stream),
                         Resolve(library, "cublasSetWorkspace_v2", &set_workspace),
                         Resolve(library, "cublasSetMathMode", &set_math_mode),
                         Resolve(library, "cublasGetStatusString", &blas->status_string_),
                         Resolve(library, "cublasGemmEx", &blas->gemm_ex_)}) {
    if (!s.ok()) return s;
  }
  auto check = [&](cublasStatus_t status, const char* what) -> absl::Status {
    if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("cuBLAS ", what, ": ", blas->status_string_(status)));
  };
  if (absl::Status s = check(create(&blas->handle_), "create"); !s.ok()) return s;
  if (absl::Status s = check(set_stream(blas->handle_, stream), "set stream"); !s.ok()) return s;
  if (absl::Status s =
          check(set_workspace(blas->handle_, workspace, workspace_bytes), "set workspace");
      !s.ok()) {
    return s;
  }
  // TF32 only where a call asks for it through its compute type.
  if (absl::Status s = check(set_math_mode(blas->handle_, CUBLAS_DEFAULT_MATH), "set math mode");
      !s.ok()) {
    return s;
  }
  return blas;
}

Blas::~Blas() {
  if (handle_ != nullptr && destroy_ != nullptr) destroy_(handle_);
  // The library stays loaded: cuBLAS registers process-wide state that a dlclose would strand.
}

absl::Status Blas::Gemm(int64_t m, int64_t n, int64_t k, const void* x, cudaDataType x_type,
                        const void* w, cudaDataType w_type, float beta, float* y,
                        cublasComputeType_t compute) const {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM of ", m, "x", n, "x", k, " exceeds cuBLAS's 32-bit sizes"));
  }
  const float alpha = 1.0f;
  // Column-major view: yᵀ[N, M] = w[N, K]·xᵀ, with w stored as a K×N column-major matrix
  // (transposed) and x as K×M (not transposed).
  const cublasStatus_t status = gemm_ex_(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, w, w_type, static_cast<int>(k), x, x_type, static_cast<int>(k),
      &beta, y, CUDA_R_32F, static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuBLAS GEMM ", m, "x", n, "x", k, ": ", status_string_(status)));
  }
  return absl::OkStatus();
}

}  // namespace waav::cuda

#endif  // !WAAV_HIP
