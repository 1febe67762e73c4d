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

// Opens the first of lib<base>.so.<CUDA major> and lib<base>.so that loads: its handle and
// name, or null with each attempt's dlerror in `errors`.
void* OpenLibrary(const std::string& base, std::string* loaded, std::string* errors) {
  for (const std::string& name :
       {absl::StrCat("lib", base, ".so.", CUBLAS_VER_MAJOR), absl::StrCat("lib", base, ".so")}) {
    if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL); library != nullptr) {
      *loaded = name;
      return library;
    }
    absl::StrAppend(errors, errors->empty() ? "" : "; ", dlerror());
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Blas>> Blas::Load(cudaStream_t stream, void* workspace,
                                                 size_t workspace_bytes) {
  std::string loaded, errors;
  void* library = OpenLibrary("cublas", &loaded, &errors);
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
  blas->stream_ = stream;
  blas->workspace_ = workspace;
  blas->workspace_bytes_ = workspace_bytes;
  blas->LoadLt();
  return blas;
}

void Blas::LoadLt() {
  std::string loaded, errors;
  void* library = OpenLibrary("cublasLt", &loaded, &errors);
  if (library == nullptr) return;  // GemmBias then declines: the bias by the epilogue kernel
  LtApi api;
  for (absl::Status s : {Resolve(library, "cublasLtCreate", &api.create),
                         Resolve(library, "cublasLtDestroy", &api.destroy),
                         Resolve(library, "cublasLtMatmulDescCreate", &api.desc_create),
                         Resolve(library, "cublasLtMatmulDescDestroy", &api.desc_destroy),
                         Resolve(library, "cublasLtMatmulDescSetAttribute", &api.desc_set),
                         Resolve(library, "cublasLtMatrixLayoutCreate", &api.layout_create),
                         Resolve(library, "cublasLtMatrixLayoutDestroy", &api.layout_destroy),
                         Resolve(library, "cublasLtMatmulPreferenceCreate", &api.pref_create),
                         Resolve(library, "cublasLtMatmulPreferenceDestroy", &api.pref_destroy),
                         Resolve(library, "cublasLtMatmulPreferenceSetAttribute", &api.pref_set),
                         Resolve(library, "cublasLtMatmulAlgoGetHeuristic", &api.heuristic),
                         Resolve(library, "cublasLtMatmul", &api.matmul)}) {
    if (!s.ok()) return;
  }
  cublasLtHandle_t handle = nullptr;
  if (api.create(&handle) != CUBLAS_STATUS_SUCCESS) return;
  lt_ = api;
  lt_handle_ = handle;
  absl::StrAppend(&library_, ", ", loaded);
}

Blas::~Blas() {
  if (lt_handle_ != nullptr) {
    absl::MutexLock lock(&lt_mutex_);
    for (auto& [key, plan] : lt_plans_) {
      if (plan.desc != nullptr) lt_.desc_destroy(plan.desc);
      for (cublasLtMatrixLayout_t layout : {plan.a, plan.b, plan.d}) {
        if (layout != nullptr) lt_.layout_destroy(layout);
      }
    }
    lt_.destroy(lt_handle_);
  }
  if (handle_ != nullptr && destroy_ != nullptr) destroy_(handle_);
  // The library stays loaded: cuBLAS registers process-wide state that a dlclose would strand.
}

namespace {

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment preference).
int AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

}  // namespace

const Blas::LtPlan& Blas::PlanLt(const LtKey& key) const {
  if (auto it = lt_plans_.find(key); it != lt_plans_.end()) return it->second;
  // (beta != 0 is part of the key only: the same descriptors, but an algorithm chosen for it.)
  [[maybe_unused]] const auto [m, n, k, x_type, w_type, compute, accumulate, x_align, w_align,
                               y_align, y_type] = key;
  LtPlan& plan = lt_plans_[key];
  // The column-major view of Gemm: D[N, M] = op(A)·B with A = w stored K×N (transposed) and
  // B = x stored K×M; C is D (beta·y in place). Any step that fails leaves the plan without an
  // algorithm (GemmBias then declines and the caller adds the bias itself).
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const int32_t bias_type = y_type;  // (cuBLASLt: an f16 D takes an f16 bias)
  const uint64_t workspace = workspace_bytes_;
  const uint32_t alignments[] = {static_cast<uint32_t>(w_align), static_cast<uint32_t>(x_align),
                                 static_cast<uint32_t>(y_align), static_cast<uint32_t>(y_align)};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status =
      lt_.desc_create(&plan.desc, static_cast<cublasComputeType_t>(compute), CUDA_R_32F);
  auto then = [&status](auto&& step) {
    if (status == CUBLAS_STATUS_SUCCESS) status = step();
  };
  then([&] {
    return lt_.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
  });
  then([&] { return lt_.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)); });
  then([&] {
    return lt_.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
  });
  then([&] {
    return lt_.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                        sizeof(bias_type));
  });
  then([&] {
    return lt_.layout_create(&plan.a, static_cast<cudaDataType>(w_type), static_cast<uint64_t>(k),
                             static_cast<uint64_t>(n), k);
  });
  then([&] {
    return lt_.layout_create(&plan.b, static_cast<cudaDataType>(x_type), static_cast<uint64_t>(k),
                             static_cast<uint64_t>(m), k);
  });
  then([&] {
    return lt_.layout_create(&plan.d, static_cast<cudaDataType>(y_type), static_cast<uint64_t>(n),
                             static_cast<uint64_t>(m), n);
  });
  then([&] { return lt_.pref_create(&preference); });
  then([&] {
    return lt_.pref_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                        sizeof(workspace));
  });
  for (int i = 0; i < 4; ++i) {
    then([&] {
      return lt_.pref_set(preference, alignment_attributes[i], &alignments[i], sizeof(uint32_t));
    });
  }
  then([&] {
    return lt_.heuristic(lt_handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1,
                         &result, &found);
  });
  if (preference != nullptr) lt_.pref_destroy(preference);
  plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0 &&
               result.state == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= workspace_bytes_;
  if (plan.found) plan.algo = result.algo;
  return plan;
}

absl::Status Blas::Gemm(int64_t m, int64_t n, int64_t k, const void* x, cudaDataType x_type,
                        const void* w, cudaDataType w_type, float beta, void* y,
                        cublasComputeType_t compute, cudaDataType y_type) const {
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
      &beta, y, y_type, static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuBLAS GEMM ", m, "x", n, "x", k, ": ", status_string_(status)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Blas::GemmBias(int64_t m, int64_t n, int64_t k, const void* x,
                                    cudaDataType x_type, const void* w, cudaDataType w_type,
                                    float beta, void* y, const void* bias,
                                    cublasComputeType_t compute, cudaDataType y_type) const {
  if (lt_handle_ == nullptr || AlignmentOf(bias) < 16) return false;
  const LtKey key{m,
                  n,
                  k,
                  static_cast<int>(x_type),
                  static_cast<int>(w_type),
                  static_cast<int>(compute),
                  beta != 0.0f,
                  AlignmentOf(x),
                  AlignmentOf(w),
                  AlignmentOf(y),
                  static_cast<int>(y_type)};
  absl::MutexLock lock(&lt_mutex_);
  const LtPlan& plan = PlanLt(key);
  if (!plan.found) return false;
  // The bias pointer is the one attribute that changes from call to call (set under the lock,
  // read by cublasLtMatmul as it enqueues).
  const cublasStatus_t set =
      lt_.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  const float alpha = 1.0f;
  const cublasStatus_t status =
      set != CUBLAS_STATUS_SUCCESS
          ? set
          : lt_.matmul(lt_handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.d, y,
                       plan.d, &plan.algo, workspace_, workspace_bytes_, stream_);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuBLASLt GEMM ", m, "x", n, "x", k, " with bias: ", status_string_(status)));
  }
  return true;
}

}  // namespace waav::cuda

#endif  // !WAAV_HIP
