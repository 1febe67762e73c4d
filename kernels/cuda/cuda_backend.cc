// CudaBackend: validation (engine/runtime/op_checks.h), memory, graph capture, and dispatch to the
// kernel launchers of kernels/cuda/*.cuh.
//
// Every op validates its arguments, plans its kernels and allocates any scratch memory at the
// call, then hands a closure that owns its tensors to Submit(): the closure runs at once (eager,
// or under CUDA stream capture) or is recorded (eager graphs). Launch errors come back from the
// call; kernel faults and bad index values from the next Synchronize() or CopyToHost().
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/backend_registry.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/backend_util.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/conv1d.cuh"
#include "kernels/cuda/copy_tickets.h"
#include "kernels/cuda/device_state.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embed.cuh"
#include "kernels/cuda/fused_linear.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/half_gemm.cuh"
#include "kernels/cuda/head_scores.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/memory_pool.h"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/persistent_step.h"
#include "kernels/cuda/quantize.cuh"
#include "kernels/cuda/shared_kv_attention.cuh"
#include "kernels/cuda/softmax.cuh"
#include "spdlog/spdlog.h"

namespace waav {
namespace {

using cuda::DecodeDeviceError;
using cuda::DeviceState;
using cuda::GpuStatus;
using cuda::kAttentionCounters;
using cuda::kGpuKind;
using cuda::RoundUp256;
using cuda::SigOp;
using cuda::ToEpilogue;

class CudaBackend final : public Backend, public CudaExtensions {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const CudaBackendOptions& options);

  std::string_view name() const override { return WAAV_GPU_NAME; }
  DeviceKind device() const override { return kGpuKind; }
  std::string Describe() const override { return description_; }
  bool supports(Op op) const override { return cuda::Supports(options_, op); }

  // ---- Memory ---------------------------------------------------------------------------------

  absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype) override {
    RETURN_IF_ERROR(NotCapturing("Allocate"));
    return cuda::AllocateDeviceTensor(state_->pool, shape, dtype);
  }

  absl::Status CopyFromHost(const void* src, size_t bytes, const Tensor& dst) override {
    RETURN_IF_ERROR(NotCapturing("CopyFromHost"));
    RETURN_IF_ERROR(checks::ValidateCopyFromHost(kGpuKind, src, bytes, dst));
    if (bytes == 0) return absl::OkStatus();
    cuda::UseDevice(state_->device);
    // Pageable memory: the runtime stages the bytes before returning (src reusable); in order.
    return GpuStatus("CopyFromHost",
                     cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream()));
  }

  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    cuda::UseDevice(state_->device);
    return cuda::AllocatePinnedHost(bytes);
  }
  absl::Status CopyFromHostAsync(const HostBuffer& src, size_t bytes, const Tensor& dst,
                                 size_t src_offset) override {
    RETURN_IF_ERROR(NotCapturing("CopyFromHostAsync"));
    cuda::UseDevice(state_->device);
    return cuda::CopyFromPinnedHost(kGpuKind, src, src_offset, bytes, dst, stream());
  }

  absl::Status CopyToHost(const Tensor& src, void* dst, size_t bytes) override {
    RETURN_IF_ERROR(NotCapturing("CopyToHost"));
    RETURN_IF_ERROR(checks::ValidateCopyToHost(kGpuKind, src, dst, bytes));
    cuda::UseDevice(state_->device);
    if (bytes > 0) {
      RETURN_IF_ERROR(GpuStatus(
          "CopyToHost", cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream())));
    }
    return Synchronize();
  }

  absl::Status Copy(const Tensor& src, const Tensor& dst) override {
    RETURN_IF_ERROR(checks::ValidateCopy(kGpuKind, src, dst, options_.half_activations));
    const bool to_half = src.dtype() != dst.dtype();  // f32 → f16, rounded to nearest
    Sign({static_cast<int64_t>(SigOp::kCopy), static_cast<int64_t>(src.size_bytes()), to_half});
    if (to_half) {
      return Submit([ctx = Ctx(), src, dst]() {
        return GpuStatus("Copy",
                         cuda::LaunchToHalf(ctx, src.data_as<float>(), src.numel(), dst.data()));
      });
    }
    return Submit([state = state_, src, dst]() {
      if (src.size_bytes() == 0) return absl::OkStatus();
      return GpuStatus("Copy", cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(),
                                               cudaMemcpyDeviceToDevice, state->graphs->stream));
    });
  }

  absl::StatusOr<uint64_t> CopyToHostAsync(const Tensor& src, const HostBuffer& dst,
                                           size_t dst_offset) override {
    RETURN_IF_ERROR(NotCapturing("CopyToHostAsync"));
    cuda::UseDevice(state_->device);
    ASSIGN_OR_RETURN(char* to, cuda::CheckCopyToPinnedHost(kGpuKind, src, dst, dst_offset));
    return copy_tickets_.Copy(stream(), to, src.data(), src.size_bytes());
  }

  absl::Status WaitForCopy(uint64_t ticket) override {
    RETURN_IF_ERROR(NotCapturing("WaitForCopy"));
    cuda::UseDevice(state_->device);
    RETURN_IF_ERROR(copy_tickets_.Wait(ticket));
    return cuda::TakeDeviceError(state_->error_host);
  }

  absl::Status Synchronize() override {
    RETURN_IF_ERROR(NotCapturing("Synchronize"));
    cuda::UseDevice(state_->device);
    RETURN_IF_ERROR(GpuStatus("Synchronize", cudaStreamSynchronize(stream())));
    return cuda::TakeDeviceError(state_->error_host);
  }

  // ---- Kernels --------------------------------------------------------------------------------

  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor* bias, Activation act,
                      const Tensor& y) override {
    return LinearImpl("Linear", x, weight, bias, act, Tensor(), y);
  }

  absl::Status LinearResidual(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              Activation act, const Tensor& residual, const Tensor& y) override {
    RETURN_IF_ERROR(checks::ValidateAdd(kGpuKind, residual, y, y));
    return LinearImpl("LinearResidual", x, weight, bias, act, residual, y);
  }

  // One GEMM (the Linear paths without HalfGemm) into f32 scratch [M, P·C], then one pass adding
  // the bias and writing the planes (f16 or f32); or, for few rows of f32 (a decoder step's Q, K
  // and V), HalfGemm writing the planes itself (one kernel).
  absl::Status LinearPlanes(const Tensor& x, const Tensor& weight, const Tensor* bias,
                            absl::Span<const Tensor> planes) override {
    ASSIGN_OR_RETURN(
        const checks::LinearDims d,
        checks::ValidateLinearPlanes(kGpuKind, x, weight, bias, planes, options_.half_activations));
    return PlanesImpl(x, weight, bias, planes, d, cuda::PlaneOutputs{}, Tensor());
  }

  // The same, the appended caches' rows placed by the epilogue (no WriteRows).
  absl::Status LinearPlanesAppend(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                  absl::Span<const Tensor> planes, int first_appended,
                                  const Tensor& positions) override {
    ASSIGN_OR_RETURN(const checks::LinearPlanesAppendDims a,
                     checks::ValidateLinearPlanesAppend(kGpuKind, x, weight, bias, planes,
                                                        first_appended, positions));
    cuda::PlaneOutputs append{};
    append.first_appended = first_appended;
    append.positions = positions.data_as<int32_t>();
    append.capacity = a.capacity;
    return PlanesImpl(x, weight, bias, planes, a.linear, append, positions);
  }

  // `append`: its first_appended, positions and capacity (the planes are filled in here);
  // `positions` held for a capturing graph.
  absl::Status PlanesImpl(const Tensor& x, const Tensor& weight, const Tensor* bias,
                          absl::Span<const Tensor> planes, const checks::LinearDims& d,
                          const cuda::PlaneOutputs& append, const Tensor& positions) {
    static_assert(kMaxLinearPlanes <= cuda::kMaxPlaneOutputs);
    const bool w_f16 = weight.dtype() == DType::kF16;
    const bool x_f16 = x.dtype() == DType::kF16, y_f16 = planes[0].dtype() == DType::kF16;
    const Tensor b = bias != nullptr ? *bias : Tensor();
    cuda::PlaneOutputs out = append;
    for (size_t p = 0; p < planes.size(); ++p) out.planes[p] = planes[p].data();
    // The planes (and positions) keep their memory alive for a graph that captures this call.
    std::vector<Tensor> held(planes.begin(), planes.end());
    held.push_back(positions);
    const int64_t plane_cols = d.n / static_cast<int64_t>(planes.size());
    const int64_t append_sig = append.first_appended * (append.capacity + 1);
    if (const absl::StatusOr<bool> done =
            HalfGemmPlanes(x, weight, b, planes, held, out, d, plane_cols, append_sig);
        !done.ok() || *done) {
      return done.status();
    }
    const cuda::GemmPlan plan = cuda::PlanGemm(state_->gemm, d.m, d.n, d.k, w_f16, false);
    const bool x_direct = x_f16 && (plan.path == cuda::GemmPath::kBlasHalf ||
                                    plan.path == cuda::GemmPath::kBlasHalfSplit);
    // f16 planes from f16 x on cuBLAS (blas_half_output): one GEMM per plane stores it in f16,
    // the bias (in f16) in cuBLASLt's epilogue; no f32 result and no pass writing the planes.
    const bool half_out = y_f16 && x_direct && append.first_appended >= std::ssize(planes) &&
                          options_.blas_half_output && options_.math == CudaMath::kFast &&
                          cuda::GemmStoresHalf(plan.path);
    if (half_out) {
      const size_t bias16_bytes =
          cuda::HalfOutputBias16Bytes(d.n, b.defined(), cuda::Epilogue::kNone);
      ASSIGN_OR_RETURN(Tensor scratch, Scratch(plan.scratch_bytes + bias16_bytes));
      Sign({static_cast<int64_t>(SigOp::kLinear), d.m, d.n, d.k, w_f16, b.defined(),
            static_cast<int64_t>(planes.size()), static_cast<int64_t>(plan.path), x_f16, y_f16, -2,
            append_sig});
      return Submit([state = state_, ctx = Ctx(), x, weight, b, held = std::move(held), out, d,
                     w_f16, plan, plane_cols, bias16_bytes, scratch]() {
        char* base = scratch.defined() ? static_cast<char*>(scratch.data()) : nullptr;
        const cuda::HalfOutput half{out.planes, static_cast<int>(held.size() - 1), plane_cols,
                                    bias16_bytes > 0 ? base + plan.scratch_bytes : nullptr};
        return cuda::RunGemmHalfOutput(state->gemm, ctx, plan, x.data(), d.m, d.k, weight.data(),
                                       w_f16, b.defined() ? b.data_as<float>() : nullptr,
                                       cuda::Epilogue::kNone, half,
                                       plan.scratch_bytes > 0 ? base : nullptr);
      });
    }
    const size_t x_bytes = x_f16 && !x_direct ? RoundUp256(static_cast<size_t>(d.m * d.k) * 4) : 0;
    const size_t temp_bytes = RoundUp256(static_cast<size_t>(d.m * d.n) * 4);
    ASSIGN_OR_RETURN(Tensor scratch, Scratch(temp_bytes + x_bytes + plan.scratch_bytes));
    Sign({static_cast<int64_t>(SigOp::kLinear), d.m, d.n, d.k, w_f16, b.defined(),
          static_cast<int64_t>(planes.size()), static_cast<int64_t>(plan.path), x_f16, y_f16, -1,
          append_sig});
    return Submit([state = state_, ctx = Ctx(), x, weight, b, held = std::move(held), out, d, w_f16,
                   plan, temp_bytes, x_bytes, x_direct, y_f16, plane_cols, scratch]() {
      char* base = static_cast<char*>(scratch.data());
      auto* gemm_out = reinterpret_cast<float*>(base);
      const float* x32 = static_cast<const float*>(x.data());
      if (x_bytes > 0) {
        auto* converted = reinterpret_cast<float*>(base + temp_bytes);
        RETURN_IF_ERROR(
            GpuStatus("LinearPlanes", cuda::LaunchToFloat(ctx, x.data(), d.m * d.k, converted)));
        x32 = converted;
      }
      cuda::GemmProblem p{
          x32, d.m, d.k, weight.data(), w_f16, d.n, nullptr, cuda::Epilogue::kNone, gemm_out};
      p.x_f16 = x_direct;
      RETURN_IF_ERROR(
          cuda::RunGemm(state->gemm, ctx, plan, p,
                        plan.scratch_bytes > 0 ? base + temp_bytes + x_bytes : nullptr));
      cuda::PlaneOutputs reported = out;
      reported.error_word = ctx.error_word;
      return GpuStatus(
          "LinearPlanes",
          cuda::LaunchEpiloguePlanes(ctx, gemm_out, d.m, d.n, plane_cols,
                                     b.defined() ? b.data_as<float>() : nullptr, reported, y_f16));
    });
  }

  // LinearPlanes by HalfGemm writing f32 planes itself (one kernel: a decoder step's Q, K and V
  // at more than skinny_max_rows rows). false: these shapes, dtypes or options take the general
  // path. `held`: the planes (and positions) for a capturing graph.
  absl::StatusOr<bool> HalfGemmPlanes(const Tensor& x, const Tensor& weight, const Tensor& b,
                                      absl::Span<const Tensor> planes,
                                      const std::vector<Tensor>& held,
                                      const cuda::PlaneOutputs& out, const checks::LinearDims& d,
                                      int64_t plane_cols, int64_t append_sig) {
    const int64_t plane_count = static_cast<int64_t>(planes.size());
    bool aligned = plane_cols % 8 == 0;
    for (int64_t p = 0; p < plane_count; ++p) {
      aligned = aligned && reinterpret_cast<uintptr_t>(out.planes[p]) % 16 == 0;
    }
    cuda::HalfGemmArgs half{x.data_as<float>(),
                            weight.data(),
                            b.defined() ? b.data_as<float>() : nullptr,
                            static_cast<float*>(out.planes[0]),
                            d.m,
                            d.n,
                            d.k,
                            cuda::Epilogue::kNone,
                            nullptr};
    const bool use = aligned && options_.use_half_gemm && options_.math == CudaMath::kFast &&
                     d.m <= options_.half_gemm_planes_max_rows && weight.dtype() == DType::kF16 &&
                     x.dtype() == DType::kF32 && planes[0].dtype() == DType::kF32 &&
                     cuda::HalfGemmSupported(half);
    const cuda::GemmPlan plan =
        use ? cuda::PlanGemm(state_->gemm, d.m, d.n, d.k, true, true) : cuda::GemmPlan{};
    if (plan.path != cuda::GemmPath::kHalfMma) return false;
    ASSIGN_OR_RETURN(Tensor scratch, Scratch(plan.scratch_bytes));
    Sign({static_cast<int64_t>(SigOp::kLinear), d.m, d.n, d.k, 1, b.defined(), plane_count,
          static_cast<int64_t>(plan.path), 0, 0, -2, append_sig});
    RETURN_IF_ERROR(Submit([state = state_, ctx = Ctx(), x, weight, b, held, out, d, plan,
                            plane_cols, scratch]() {
      cuda::GemmProblem p{x.data_as<float>(),
                          d.m,
                          d.k,
                          weight.data(),
                          true,
                          d.n,
                          b.defined() ? b.data_as<float>() : nullptr,
                          cuda::Epilogue::kNone,
                          nullptr};
      cuda::PlaneOutputs reported = out;
      reported.error_word = ctx.error_word;
      p.planes = &reported;
      p.plane_cols = plane_cols;
      return cuda::RunGemm(state->gemm, ctx, plan, p, scratch.defined() ? scratch.data() : nullptr);
    }));
    return true;
  }

  // Linear, and with `residual` defined y = residual + Linear(...): fused into HalfGemm's
  // epilogue, else the GEMM into scratch followed by the Add kernel.
  // f16 activations (Op::kHalfActivations): an f16 x goes to the f16 cuBLAS GEMM as it is (any
  // other path converts it to f32 scratch first); an f16 y is the f32 result rounded by the
  // epilogue (cuBLAS paths: bias and activation there too).
  absl::Status LinearImpl(const char* op, const Tensor& x, const Tensor& weight, const Tensor* bias,
                          Activation act, const Tensor& residual, const Tensor& y) {
    ASSIGN_OR_RETURN(
        const checks::LinearDims d,
        checks::ValidateLinear(kGpuKind, x, weight, bias, y, options_.half_activations));
    ASSIGN_OR_RETURN(const cuda::Epilogue epilogue, ToEpilogue(op, act));
    const bool w_f16 = weight.dtype() == DType::kF16;
    const bool x_f16 = x.dtype() == DType::kF16, y_f16 = y.dtype() == DType::kF16;
    const Tensor b = bias != nullptr ? *bias : Tensor();
    cuda::HalfGemmArgs half{x.data_as<float>(),
                            weight.data(),
                            b.defined() ? b.data_as<float>() : nullptr,
                            y.data_as<float>(),
                            d.m,
                            d.n,
                            d.k,
                            epilogue,
                            nullptr};
    half.residual = residual.defined() ? residual.data_as<float>() : nullptr;
    const bool few_rows = d.m <= options_.half_gemm_few_rows;
    const bool half_ok =
        w_f16 && (few_rows || options_.half_gemm_max_k <= 0 || d.k <= options_.half_gemm_max_k) &&
        (few_rows || options_.half_gemm_max_n <= 0 || d.n <= options_.half_gemm_max_n) &&
        (options_.half_gemm_max_rows <= 0 || d.m <= options_.half_gemm_max_rows) &&
        (few_rows || d.m >= options_.half_gemm_min_rows) && !x_f16 && !y_f16 &&
        cuda::HalfGemmSupported(half);
    const cuda::GemmPlan plan = cuda::PlanGemm(state_->gemm, d.m, d.n, d.k, w_f16, half_ok);
    const bool fused = plan.path == cuda::GemmPath::kHalfMma;
    const bool x_direct = x_f16 && (plan.path == cuda::GemmPath::kBlasHalf ||
                                    plan.path == cuda::GemmPath::kBlasHalfSplit);
    const size_t x_bytes = x_f16 && !x_direct ? RoundUp256(static_cast<size_t>(d.m * d.k) * 4) : 0;
    const bool blas_path = cuda::GemmAccumulates(plan.path);
    // In place without activation on a cuBLAS path: the GEMM adds into y (beta = 1), then the
    // bias. Otherwise an unfused residual takes a temporary and the Add kernel.
    const bool accumulate = residual.defined() && !fused && residual.data() == y.data() &&
                            residual.size_bytes() == y.size_bytes() &&
                            epilogue == cuda::Epilogue::kNone && cuda::GemmAccumulates(plan.path);
    // An f16 y from f16 x on cuBLAS: stored in f16 by the GEMM (blas_half_output), the bias
    // (without activation) in f16 for cuBLASLt's epilogue.
    const bool half_out = y_f16 && x_direct && !residual.defined() && options_.blas_half_output &&
                          options_.math == CudaMath::kFast && cuda::GemmStoresHalf(plan.path);
    const size_t bias16_bytes =
        half_out ? cuda::HalfOutputBias16Bytes(d.n, b.defined(), epilogue) : 0;
    const size_t temp_bytes = (residual.defined() && !fused && !accumulate) || (y_f16 && !half_out)
                                  ? RoundUp256(static_cast<size_t>(d.m * d.n) * 4)
                                  : 0;
    ASSIGN_OR_RETURN(Tensor scratch,
                     Scratch(temp_bytes + x_bytes + plan.scratch_bytes + bias16_bytes));
    Sign({static_cast<int64_t>(SigOp::kLinear), d.m, d.n, d.k, w_f16, b.defined(),
          static_cast<int64_t>(epilogue), static_cast<int64_t>(plan.path), residual.defined(),
          accumulate, x_f16, y_f16, half_out});
    if (half_out) {
      return Submit([state = state_, ctx = Ctx(), x, weight, b, y, d, w_f16, epilogue, plan,
                     bias16_bytes, scratch]() {
        char* base = scratch.defined() ? static_cast<char*>(scratch.data()) : nullptr;
        void* const planes[] = {y.data()};
        const cuda::HalfOutput out{planes, 1, d.n,
                                   bias16_bytes > 0 ? base + plan.scratch_bytes : nullptr};
        return cuda::RunGemmHalfOutput(state->gemm, ctx, plan, x.data(), d.m, d.k, weight.data(),
                                       w_f16, b.defined() ? b.data_as<float>() : nullptr, epilogue,
                                       out, plan.scratch_bytes > 0 ? base : nullptr);
      });
    }
    return Submit([state = state_, ctx = Ctx(), x, weight, b, residual, y, d, w_f16, epilogue, plan,
                   fused, accumulate, temp_bytes, x_bytes, x_direct, y_f16, blas_path, scratch,
                   op]() {
      char* base = scratch.defined() ? static_cast<char*>(scratch.data()) : nullptr;
      float* out = temp_bytes > 0 ? reinterpret_cast<float*>(base) : y.data_as<float>();
      const float* x32 = static_cast<const float*>(x.data());
      if (x_bytes > 0) {
        float* converted = reinterpret_cast<float*>(base + temp_bytes);
        RETURN_IF_ERROR(GpuStatus(op, cuda::LaunchToFloat(ctx, x.data(), d.m * d.k, converted)));
        x32 = converted;
      }
      // An f16 y after a cuBLAS GEMM: bias and activation in the rounding epilogue below.
      const bool late_epilogue = y_f16 && blas_path;
      cuda::GemmProblem p{x32,
                          d.m,
                          d.k,
                          weight.data(),
                          w_f16,
                          d.n,
                          b.defined() && !late_epilogue ? b.data_as<float>() : nullptr,
                          late_epilogue ? cuda::Epilogue::kNone : epilogue,
                          out,
                          nullptr,
                          fused && residual.defined() ? residual.data_as<float>() : nullptr,
                          accumulate};
      p.x_f16 = x_direct;
      RETURN_IF_ERROR(
          cuda::RunGemm(state->gemm, ctx, plan, p,
                        plan.scratch_bytes > 0 ? base + temp_bytes + x_bytes : nullptr));
      if (y_f16) {
        return GpuStatus(
            op, cuda::LaunchEpilogueToHalf(
                    ctx, out, d.m, d.n, late_epilogue && b.defined() ? b.data_as<float>() : nullptr,
                    late_epilogue ? epilogue : cuda::Epilogue::kNone, y.data()));
      }
      if (temp_bytes == 0) return absl::OkStatus();
      return GpuStatus(
          op, cuda::LaunchAdd(ctx, residual.data_as<float>(), out, y.data_as<float>(), d.m * d.n));
    });
  }

  absl::Status Conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride,
                      int padding, Activation act, const Tensor& y) override {
    ASSIGN_OR_RETURN(const checks::Conv1dDims s,
                     checks::ValidateConv1d(kGpuKind, x, weight, bias, stride, padding, y));
    ASSIGN_OR_RETURN(const cuda::Epilogue epilogue, ToEpilogue("Conv1d", act));
    const bool w_f16 = weight.dtype() == DType::kF16;
    const int64_t m = s.batch * s.out_time, k = s.in_channels * s.kernel_size;
    // HalfGemm gathers the im2col matrix as it loads (an implicit GEMM: no column matrix).
    const cuda::ConvGather gather{s.time,        s.in_channels, s.out_time,
                                  s.kernel_size, s.stride,      s.padding};
    const cuda::HalfGemmArgs half{x.data_as<float>(),
                                  weight.data(),
                                  bias.data_as<float>(),
                                  y.data_as<float>(),
                                  m,
                                  s.out_channels,
                                  k,
                                  epilogue,
                                  &gather};
    cuda::GemmPlan plan =
        cuda::PlanGemm(state_->gemm, m, s.out_channels, k, w_f16,
                       w_f16 && options_.half_gemm_conv &&
                           (options_.half_gemm_max_rows <= 0 || m <= options_.half_gemm_max_rows) &&
                           cuda::HalfGemmSupported(half),
                       /*conv=*/true);
    const bool implicit = plan.path == cuda::GemmPath::kHalfMma;
    // A 1-wide kernel without stride or padding reads x as it is.
    const bool direct = implicit || (s.kernel_size == 1 && s.stride == 1 && s.padding == 0);
    // For the f16 cuBLAS GEMM the column matrix is built in f16 (no conversion pass after it).
    const bool col_f16 =
        options_.half_conv_columns && !direct && plan.path == cuda::GemmPath::kBlasHalf;
    if (col_f16) plan.scratch_bytes = 0;  // the GEMM's own f16 copy of x is not needed
    const size_t col_bytes =
        direct ? 0 : RoundUp256(static_cast<size_t>(m * k) * (col_f16 ? 2 : sizeof(float)));
    ASSIGN_OR_RETURN(Tensor scratch, Scratch(col_bytes + plan.scratch_bytes));
    Sign({static_cast<int64_t>(SigOp::kConv1d), s.batch, s.time, s.in_channels, s.out_channels,
          s.kernel_size, s.stride, s.padding, w_f16, static_cast<int64_t>(epilogue),
          static_cast<int64_t>(plan.path)});
    return Submit([state = state_, ctx = Ctx(), x, weight, bias, y, s, m, k, direct, implicit,
                   gather, col_bytes, col_f16, w_f16, epilogue, plan, scratch]() {
      const float* col = x.data_as<float>();
      char* base = scratch.defined() ? static_cast<char*>(scratch.data()) : nullptr;
      if (!direct) {
        const cuda::Im2colShape shape{s.batch,    s.time,   s.in_channels, s.kernel_size,
                                      s.out_time, s.stride, s.padding};
        RETURN_IF_ERROR(GpuStatus(
            "Conv1d im2col", cuda::LaunchIm2col(ctx, x.data_as<float>(), shape, base, col_f16)));
        col = reinterpret_cast<const float*>(base);
      }
      cuda::GemmProblem p{col,
                          m,
                          k,
                          weight.data(),
                          w_f16,
                          s.out_channels,
                          bias.data_as<float>(),
                          epilogue,
                          y.data_as<float>(),
                          implicit ? &gather : nullptr};
      p.x_f16 = col_f16;
      return cuda::RunGemm(state->gemm, ctx, plan, p,
                           plan.scratch_bytes > 0 ? base + col_bytes : nullptr);
    });
  }

  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         const Tensor& y) override {
    ASSIGN_OR_RETURN(
        const checks::RowDims d,
        checks::ValidateLayerNorm(kGpuKind, x, gamma, beta, eps, y, options_.half_activations));
    const bool y_f16 = y.dtype() == DType::kF16;
    Sign({static_cast<int64_t>(SigOp::kLayerNorm), d.rows, d.cols, y_f16});
    return Submit([state = state_, ctx = Ctx(), x, gamma, beta, eps, y, d, y_f16]() {
      return GpuStatus(
          "LayerNorm",
          cuda::LaunchLayerNorm(ctx, x.data_as<float>(), d.rows, d.cols, gamma.data_as<float>(),
                                beta.data_as<float>(), eps, y.data(), y_f16));
    });
  }

  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& y) override {
    RETURN_IF_ERROR(checks::ValidateAdd(kGpuKind, a, b, y));
    Sign({static_cast<int64_t>(SigOp::kAdd), y.numel(), b.numel()});
    return Submit([state = state_, ctx = Ctx(), a, b, y]() {
      return GpuStatus("Add", cuda::LaunchAdd(ctx, a.data_as<float>(), b.data_as<float>(),
                                              y.data_as<float>(), y.numel(), b.numel()));
    });
  }

  absl::Status Gelu(const Tensor& x, const Tensor& y) override {
    RETURN_IF_ERROR(checks::ValidateGelu(kGpuKind, x, y));
    Sign({static_cast<int64_t>(SigOp::kGelu), y.numel()});
    return Submit([state = state_, ctx = Ctx(), x, y]() {
      return GpuStatus("Gelu",
                       cuda::LaunchGelu(ctx, x.data_as<float>(), y.data_as<float>(), y.numel()));
    });
  }

  int shared_kv_max_width() const override {
    return std::min(Backend::kMaxSharedKvWidth, cuda::SharedKvMaxWidth(state_->gpu_shape));
  }

  absl::Status SharedKvAttention(const Tensor& q, const Tensor& kv, const Tensor* kv_scales,
                                 int num_heads, float scale, const Tensor& out) override {
    static_assert(cuda::kSharedKvMaxWidth == Backend::kMaxSharedKvWidth);
    ASSIGN_OR_RETURN(const checks::SharedKvAttentionDims d,
                     checks::ValidateSharedKvAttention(kGpuKind, q, kv, kv_scales, num_heads, scale,
                                                       out, options_.half_activations,
                                                       /*quantized=*/true));
    if (!supports(Op::kSharedKvAttention) || kv.dtype() == DType::kF32) {
      return absl::UnimplementedError(
          "SharedKvAttention: the CUDA backend's kernel takes kv as f16 or i8 (half activations "
          "on, CudaMath::kFast, a build with tensor cores)");
    }
    const Tensor scales = kv_scales != nullptr ? *kv_scales : Tensor();
    const cuda::SharedKvArgs args{q.data_as<float>(),
                                  kv.data(),
                                  scales.defined() ? scales.data_as<float>() : nullptr,
                                  out.data(),
                                  out.dtype() == DType::kF16,
                                  d.batch,
                                  d.q_len * d.heads,
                                  d.kv_len,
                                  static_cast<int>(d.width),
                                  scale};
    const cuda::SharedKvPlan plan = cuda::PlanSharedKvAttention(
        args, state_->gpu_shape, kAttentionCounters, options_.shared_kv_splits,
        options_.shared_kv_deep_pipeline, RetainBytes(), options_.shared_kv_i8_stages);
    if (!plan.supported) {
      return absl::InvalidArgumentError(
          absl::StrCat("SharedKvAttention: kv ", kv.Describe(), " and out ", out.Describe(),
                       " must be 16-byte aligned, and a block's tiles of width ", d.width,
                       " must fit the GPU's shared memory (",
                       state_->gpu_shape.shared_bytes_per_block, " bytes a block)"));
    }
    ASSIGN_OR_RETURN(Tensor scratch, Scratch(plan.partial_bytes));
    Sign({static_cast<int64_t>(SigOp::kSharedKvAttention), d.batch, d.q_len, d.kv_len, d.heads,
          d.width, plan.splits, plan.stages, args.out_f16, plan.retain_rows,
          static_cast<int64_t>(kv.dtype())});
    return Submit([state = state_, ctx = Ctx(), q, kv, scales, out, args, plan, scratch]() {
      return GpuStatus("SharedKvAttention",
                       cuda::LaunchSharedKvAttention(
                           ctx, args, plan, scratch.defined() ? scratch.data_as<float>() : nullptr,
                           state->counters.data_as<int>()));
    });
  }

  absl::Status QuantizeChannels(const Tensor& x, const Tensor& q, const Tensor& scales) override {
    ASSIGN_OR_RETURN(const checks::QuantizeChannelsDims d,
                     checks::ValidateQuantizeChannels(kGpuKind, x, q, scales));
    Sign({static_cast<int64_t>(SigOp::kQuantizeChannels), d.batch, d.rows, d.channels});
    return Submit([ctx = Ctx(), x, q, scales, d]() {
      return GpuStatus("QuantizeChannels", cuda::LaunchQuantizeChannels(
                                               ctx, x.data_as<float>(), d.batch, d.rows, d.channels,
                                               q.data_as<int8_t>(), scales.data_as<float>()));
    });
  }

  absl::Status Attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor* kv_lengths, int num_heads, float scale, bool causal,
                         const Tensor& out) override {
    ASSIGN_OR_RETURN(const checks::AttentionDims d,
                     checks::ValidateAttention(kGpuKind, q, k, v, kv_lengths, num_heads, scale, out,
                                               options_.half_activations));
    const bool half_inputs = q.dtype() == DType::kF16;
    // An f32 q over f16 k and v (an f16 K/V cache): the kernels widen them as they load.
    const bool kv_half = !half_inputs && k.dtype() == DType::kF16;
    if (d.head_dim > cuda::kMaxHeadDim) {
      return absl::UnimplementedError(absl::StrCat("Attention: head_dim ", d.head_dim,
                                                   " exceeds the CUDA kernels' limit of ",
                                                   cuda::kMaxHeadDim));
    }
    const Tensor lengths = kv_lengths != nullptr ? *kv_lengths : Tensor();
    cuda::AttentionArgs args{q.data_as<float>(),
                             k.data_as<float>(),
                             v.data_as<float>(),
                             lengths.defined() ? lengths.data_as<int32_t>() : nullptr,
                             out.data_as<float>(),
                             d.batch,
                             d.q_len,
                             d.kv_len,
                             static_cast<int>(d.heads),
                             static_cast<int>(d.head_dim),
                             scale,
                             causal};
    if (half_inputs) {
      args.half_inputs = true;
      args.q16 = q.data();
      args.k16 = k.data();
      args.v16 = v.data();
    }
    if (kv_half) {
      args.kv_half = true;
      args.k16 = k.data();
      args.v16 = v.data();
    }
    if (out.dtype() == DType::kF16) {
      args.out_half = true;
      args.out16 = out.data();
      args.out = nullptr;
    }
    const cuda::AttentionChoice choice = cuda::ChooseAttention(
        args, q.numel(), k.numel(), options_, state_->ctx.sm_count, kAttentionCounters);
    ASSIGN_OR_RETURN(Tensor scratch, Scratch(choice.scratch_bytes));
    Sign({static_cast<int64_t>(SigOp::kAttention), d.batch, d.q_len, d.kv_len, d.heads, d.head_dim,
          causal, lengths.defined(), choice.flash, choice.flash2, choice.split.splits,
          choice.flash_plan.splits, half_inputs, kv_half, choice.decode.supported,
          choice.decode.splits, choice.decode.evict_first, args.out_half});
    return Submit([state = state_, ctx = Ctx(), q, k, v, lengths, out, args, choice, scratch]() {
      return GpuStatus(
          "Attention",
          cuda::LaunchAttention(ctx, args, choice, scratch.defined() ? scratch.data() : nullptr,
                                state->counters.data_as<int>()));
    });
  }

  absl::Status WriteRows(const Tensor& src, const Tensor& positions, const Tensor& dst) override {
    ASSIGN_OR_RETURN(const checks::WriteRowsDims d,
                     checks::ValidateWriteRows(kGpuKind, src, positions, dst));
    Sign({static_cast<int64_t>(SigOp::kWriteRows), d.batch, d.rows, d.channels, d.capacity,
          static_cast<int64_t>(src.dtype())});
    return Submit([state = state_, ctx = Ctx(), src, positions, dst, d]() {
      const int64_t row_bytes = d.channels * static_cast<int64_t>(SizeOf(src.dtype()));
      return GpuStatus("WriteRows",
                       cuda::LaunchWriteRows(ctx, src.data(), positions.data_as<int32_t>(), d.batch,
                                             d.rows, row_bytes, d.capacity, dst.data()));
    });
  }

  absl::Status GatherRows(const Tensor& src, absl::Span<const int64_t> rows,
                          const Tensor& dst) override {
    ASSIGN_OR_RETURN(const auto d, checks::ValidateGatherRows(kGpuKind, src, rows, dst));
    const int64_t row_bytes = d.channels * static_cast<int64_t>(SizeOf(src.dtype()));
    const uint64_t hash = cuda::HashCombine(cuda::kHashSeed, rows.data(), rows.size() * 8);
    Sign({static_cast<int64_t>(SigOp::kGatherRows), d.rows, row_bytes, static_cast<int64_t>(hash)});
    return Submit([ctx = Ctx(), src, dst, row_bytes, at = std::vector(rows.begin(), rows.end())]() {
      return GpuStatus("GatherRows", cuda::LaunchGatherRows(ctx, src.data(), at.data(), at.size(),
                                                            row_bytes, dst.data()));
    });
  }

  absl::Status HeadScores(const Tensor& q, const Tensor& k, int head_dim, float scale,
                          absl::Span<const HeadScoresItem> items, const Tensor& out) override {
    ASSIGN_OR_RETURN(const auto d,
                     checks::ValidateHeadScores(kGpuKind, q, k, head_dim, scale, items, out));
    const bool k_half = k.dtype() == DType::kF16;
    Sign({static_cast<int64_t>(SigOp::kHeadScores), d.batch, d.q_len, d.k_len, d.channels, head_dim,
          k_half,
          static_cast<int64_t>(cuda::HashCombine(cuda::kHashSeed, items.data(),
                                                 items.size() * sizeof(HeadScoresItem)))});
    return Submit([ctx = Ctx(), q, k, out, d, head_dim, scale, k_half,
                   at = std::vector(items.begin(), items.end())]() {
      return GpuStatus("HeadScores", cuda::LaunchHeadScores(
                                         ctx, q.data_as<float>(), k.data(), k_half, d.q_len,
                                         d.k_len, d.channels, head_dim, scale, at.data(),
                                         static_cast<int64_t>(at.size()), out.data_as<float>()));
    });
  }

  absl::Status Embed(const Tensor& tokens, const Tensor& start_positions, const Tensor& token_table,
                     const Tensor& position_table, const Tensor& y) override {
    ASSIGN_OR_RETURN(
        const checks::EmbedDims d,
        checks::ValidateEmbed(kGpuKind, tokens, start_positions, token_table, position_table, y));
    Sign({static_cast<int64_t>(SigOp::kEmbed), d.batch, d.time, d.channels, d.vocab,
          d.max_positions, static_cast<int64_t>(token_table.dtype()),
          static_cast<int64_t>(position_table.dtype())});
    return Submit([state = state_, ctx = Ctx(), tokens, start_positions, token_table,
                   position_table, y, d]() {
      return GpuStatus(
          "Embed",
          cuda::LaunchEmbed(ctx, tokens.data_as<int32_t>(), start_positions.data_as<int32_t>(),
                            d.batch, d.time, token_table.data(), token_table.dtype() == DType::kF16,
                            d.vocab, position_table.data(), position_table.dtype() == DType::kF16,
                            d.max_positions, d.channels, y.data_as<float>()));
    });
  }

  absl::Status ArgmaxLogSumExp(const Tensor& logits, const Tensor& masks, const Tensor& mask_index,
                               const Tensor& out) override {
    ASSIGN_OR_RETURN(const checks::ArgmaxDims d,
                     checks::ValidateArgmaxLogSumExp(kGpuKind, logits, masks, mask_index, out));
    Sign({static_cast<int64_t>(SigOp::kArgmaxLogSumExp), d.rows, d.cols, d.num_masks});
    return Submit([state = state_, ctx = Ctx(), logits, masks, mask_index, out, d,
                   cluster = options_.argmax_cluster_blocks]() {
      return GpuStatus("ArgmaxLogSumExp",
                       cuda::LaunchArgmaxLogSumExp(ctx, logits.data_as<float>(), d.rows, d.cols,
                                                   masks.data_as<int32_t>(), d.mask_words,
                                                   d.num_masks, mask_index.data_as<int32_t>(),
                                                   out.data_as<float>(), cluster));
    });
  }

  absl::Status FeedChoices(const Tensor& choices, const Tensor& mask_index, int32_t max_position,
                           const Tensor& tokens, const Tensor& positions,
                           const Tensor& lengths) override {
    ASSIGN_OR_RETURN(const int64_t rows,
                     checks::ValidateFeedChoices(kGpuKind, choices, mask_index, max_position,
                                                 tokens, positions, lengths));
    Sign({static_cast<int64_t>(SigOp::kFeedChoices), rows, max_position});
    return Submit([state = state_, ctx = Ctx(), choices, mask_index, max_position, tokens,
                   positions, lengths, rows]() {
      return GpuStatus(
          "FeedChoices",
          cuda::LaunchFeedChoices(ctx, choices.data_as<float>(), mask_index.data_as<int32_t>(),
                                  rows, max_position, tokens.data_as<int32_t>(),
                                  positions.data_as<int32_t>(), lengths.data_as<int32_t>()));
    });
  }

  absl::Status LogSoftmax(const Tensor& x, const Tensor& y) override {
    ASSIGN_OR_RETURN(const checks::RowDims d, checks::ValidateLogSoftmax(kGpuKind, x, y));
    Sign({static_cast<int64_t>(SigOp::kLogSoftmax), d.rows, d.cols});
    return Submit([state = state_, ctx = Ctx(), x, y, d]() {
      return GpuStatus("LogSoftmax", cuda::LaunchLogSoftmax(ctx, x.data_as<float>(), d.rows, d.cols,
                                                            y.data_as<float>()));
    });
  }

  // ---- Extensions -----------------------------------------------------------------------------

  absl::Status FusedLinear(const FusedLinearArgs& a) override {
    cuda::FusedLinearParams p{};
    Tensor x2, y2, q2;
    RETURN_IF_ERROR(cuda::PrepareFusedLinear(kGpuKind, a, p, x2, y2, q2));
    const int64_t m = p.m, n = p.n, k = p.k;
    const bool norm = a.norm_gamma.defined();
    const cuda::Epilogue epilogue = p.act;
    if (cuda::FusedLinearSupported(p)) {
      Sign({static_cast<int64_t>(SigOp::kFusedLinear), m, n, k, norm, p.w_f16,
            static_cast<int64_t>(epilogue), static_cast<int64_t>(p.output)});
      return Submit([state = state_, ctx = Ctx(), a, p]() {
        return GpuStatus("FusedLinear", cuda::LaunchFusedLinear(ctx, p));
      });
    }
    // The same result from separate kernels (more rows than the fused kernel takes).
    Tensor input = x2;
    if (norm) {
      ASSIGN_OR_RETURN(Tensor normed, Scratch(static_cast<size_t>(m * k) * sizeof(float)));
      ASSIGN_OR_RETURN(input, normed.Slice(0, m * k));
      ASSIGN_OR_RETURN(input, input.Reshape({m, k}));
      RETURN_IF_ERROR(LayerNorm(x2, a.norm_gamma, a.norm_beta, a.eps, input));
    }
    const Tensor* bias = a.bias.defined() ? &a.bias : nullptr;
    if (a.output == Output::kStore) return Linear(input, a.weight, bias, a.act, y2);
    ASSIGN_OR_RETURN(Tensor result, Scratch(static_cast<size_t>(m * n) * sizeof(float)));
    ASSIGN_OR_RETURN(result, result.Slice(0, m * n));
    ASSIGN_OR_RETURN(result, result.Reshape({m, n}));
    RETURN_IF_ERROR(Linear(input, a.weight, bias, a.act, result));
    if (a.output == Output::kAccumulate) return Add(y2, result, y2);
    Sign({static_cast<int64_t>(SigOp::kFusedLinear), m, n, 3});
    return Submit([state = state_, ctx = Ctx(), a, result, p]() {
      return GpuStatus("FusedLinear",
                       cuda::LaunchQkvScatter(ctx, result.data_as<float>(), p.m, p.n / 3, p.q,
                                              p.k_cache, p.v_cache, p.positions, p.capacity));
    });
  }

  absl::Status LaunchRaw(const std::string& what, RawLaunch launch, std::vector<Tensor> keep,
                         std::vector<int64_t> signature) override {
    if (!launch) return absl::InvalidArgumentError("LaunchRaw: no launch function");
    if (capturing_) {
      Sign({static_cast<int64_t>(SigOp::kRaw), static_cast<int64_t>(signature.size())});
      for (int64_t v : signature) signature_ = cuda::HashCombine(signature_, &v, sizeof(v));
    }
    return Submit(
        [state = state_, ctx = Ctx(), what, launch = std::move(launch), keep = std::move(keep)]() {
          return GpuStatus(what.c_str(), static_cast<cudaError_t>(launch(ctx)));
        });
  }

  int multiprocessor_count() const override { return state_->ctx.sm_count; }

  absl::StatusOr<std::unique_ptr<PreparedDecoderStep>> PrepareDecoderStep(
      const DecoderStepWeights& weights) override {
    RETURN_IF_ERROR(NotCapturing("PrepareDecoderStep"));
    cuda::UseDevice(state_->device);  // (what fits is asked of the current device)
    ASSIGN_OR_RETURN(std::unique_ptr<cuda::PersistentDecoderStep> step,
                     cuda::PersistentDecoderStep::Create(*this, *this, weights));
    // Which kernel the steps will take (operators compare it with the benchmarks).
    spdlog::info(
        "cuda backend: decoder steps of 1 to {} rows as {} (f16 cross K/V; the cooperative "
        "persistent kernel otherwise)",
        step->max_batch(),
        step->UsesClusterStep(1, true) ? "the cluster step (thread-block clusters of 16)"
                                       : "the cooperative persistent kernel (no cluster launch "
                                         "of 16 blocks on this device)");
    return std::unique_ptr<PreparedDecoderStep>(std::move(step));
  }

  // ---- Launch hints ---------------------------------------------------------------------------

  void SetLaunchHint(LaunchHint hint) override {
    if (hint == launch_hint_) return;
    launch_hint_ = hint;
    // Launch attributes are part of what a capture records: a graph captured under another hint
    // must not take this one's executable from the cache.
    Sign({static_cast<int64_t>(SigOp::kLaunchHint), static_cast<int64_t>(hint)});
  }

  // ---- Graph capture --------------------------------------------------------------------------

  absl::Status BeginCapture() override {
    if (capturing_) return absl::FailedPreconditionError("BeginCapture: already capturing");
    cuda::UseDevice(state_->device);
    if (options_.use_graphs) {
      RETURN_IF_ERROR(GpuStatus("BeginCapture",
                                cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed)));
    }
    capturing_ = true;
    capture_error_ = absl::OkStatus();
    captured_.clear();
    signature_ = cuda::kHashSeed;
    Sign({static_cast<int64_t>(SigOp::kLaunchHint), static_cast<int64_t>(launch_hint_)});
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Graph>> EndCapture() override {
    if (!capturing_) return absl::FailedPreconditionError("EndCapture: no capture in progress");
    capturing_ = false;
    std::vector<cuda::Node> nodes = std::exchange(captured_, {});
    if (!options_.use_graphs) {
      return std::unique_ptr<Graph>(cuda::CudaGraph::Eager(state_->graphs, std::move(nodes)));
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t err = cudaStreamEndCapture(stream(), &graph);
    if (!capture_error_.ok() || err != cudaSuccess) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      if (!capture_error_.ok()) {
        return absl::Status(
            capture_error_.code(),
            absl::StrCat("EndCapture: a captured call failed: ", capture_error_.message()));
      }
      return GpuStatus("EndCapture", err);
    }
    ASSIGN_OR_RETURN(
        std::unique_ptr<cuda::CudaGraph> result,
        cuda::CudaGraph::Instantiate(state_->graphs, graph, signature_, std::move(nodes)));
    return std::unique_ptr<Graph>(std::move(result));
  }

  // ---- Statistics -----------------------------------------------------------------------------

  BackendStats stats() const override {
    BackendStats s;
    s.kernel_launches = state_->graphs->kernel_launches.load(std::memory_order_relaxed);
    s.graph_replays = state_->graphs->graph_replays.load(std::memory_order_relaxed);
    s.memory_in_use_bytes = state_->pool->in_use_bytes();
    s.memory_held_bytes = s.memory_in_use_bytes + state_->pool->cached_bytes();
    s.memory_capacity_bytes = memory_capacity_bytes_;
    return s;
  }

 private:
  CudaBackend(const CudaBackendOptions& options, std::shared_ptr<DeviceState> state,
              std::string description, uint64_t memory_capacity_bytes)
      : options_(options),
        state_(std::move(state)),
        description_(std::move(description)),
        memory_capacity_bytes_(memory_capacity_bytes) {}

  cudaStream_t stream() const { return state_->graphs->stream; }

  // How the next call launches: the device's context, without PDL under
  // LaunchHint::kLargeKernels unless options_.pdl_large_kernels. Closures keep their own copy, so
  // that an eager graph replays with the launches it was recorded with.
  cuda::LaunchContext Ctx() const {
    cuda::LaunchContext ctx = state_->ctx;
    if (launch_hint_ == LaunchHint::kLargeKernels && !options_.pdl_large_kernels) ctx.pdl = false;
    return ctx;
  }

  // Runs `node` now, and keeps it while capturing (it owns the captured call's memory); with
  // graphs disabled, a capture only records it.
  template <typename F>
  absl::Status Submit(F&& node) {
    cuda::UseDevice(state_->device);
    if (!capturing_) {
      state_->graphs->kernel_launches.fetch_add(1, std::memory_order_relaxed);
      return node();
    }
    if (!options_.use_graphs) {
      captured_.emplace_back(std::forward<F>(node));
      return absl::OkStatus();
    }
    absl::Status status = node();
    if (!status.ok() && capture_error_.ok()) capture_error_ = status;
    captured_.emplace_back(std::forward<F>(node));
    return status;
  }

  // SharedKvAttention's L2 hints: off (-1: asked for none, or the device sets no L2 aside), or
  // the bytes of rows to keep, within the L2 set aside for them (the device's maximum may be less
  // than asked; 0 asked: every row evict-first).
  int64_t RetainBytes() const {
    if (options_.shared_kv_l2_retain_bytes < 0) return -1;
    if (options_.shared_kv_l2_retain_bytes > 0 && state_->l2_set_aside == 0) return -1;
    return std::min(options_.shared_kv_l2_retain_bytes, static_cast<int64_t>(state_->l2_set_aside));
  }

  // Adds a call's shape to the capture signature (graph.h).
  void Sign(std::initializer_list<int64_t> values) {
    if (!capturing_) return;
    for (int64_t v : values) signature_ = cuda::HashCombine(signature_, &v, sizeof(v));
  }

  // Device scratch owned by one call (and by a graph that captures it); undefined for 0 bytes.
  // Allowed while capturing: it is memory of the call, not of the caller.
  absl::StatusOr<Tensor> Scratch(size_t bytes) {
    if (bytes == 0) return Tensor();
    return cuda::AllocateDeviceTensor(state_->pool, Shape{static_cast<int64_t>((bytes + 3) / 4)},
                                      DType::kF32);
  }

  absl::Status NotCapturing(const char* op) const {
    if (!capturing_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(op, " is not allowed while a graph is being captured"));
  }

  CudaBackendOptions options_;
  std::shared_ptr<DeviceState> state_;
  std::string description_;
  const uint64_t memory_capacity_bytes_;
  bool capturing_ = false;
  LaunchHint launch_hint_ = LaunchHint::kDefault;
  absl::Status capture_error_;
  std::vector<cuda::Node> captured_;
  uint64_t signature_ = cuda::kHashSeed;
  cuda::CopyTickets copy_tickets_;  // CopyToHostAsync's
};

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const CudaBackendOptions& options) {
  RETURN_IF_ERROR(cuda::ValidateOptions(options));
  ASSIGN_OR_RETURN(const cudaDeviceProp props, cuda::OpenDevice(options.device_index));
  std::string gemm;
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceState> state,
                   cuda::CreateDeviceState(options, props, &gemm));
  const bool pdl = state->ctx.pdl;
  std::string description =
      cuda::DescribeDevice(props, gemm, options.math == CudaMath::kFast, options.use_graphs, pdl);
  if (state->l2_set_aside > 0) {
    absl::StrAppendFormat(&description, "; L2 kept for the encoder output %.1f MiB",
                          static_cast<double>(state->l2_set_aside) / (1 << 20));
  }
  return std::unique_ptr<Backend>(
      new CudaBackend(options, std::move(state), std::move(description), props.totalGlobalMem));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateRegistered(const BackendOptions& options) {
  CudaBackendOptions cuda_options;
  cuda_options.device_index = options.device_index;
  if (options.gpu_l2_encoder_bytes >= 0) {
    cuda_options.shared_kv_l2_retain_bytes =
        options.gpu_l2_encoder_bytes > 0 ? options.gpu_l2_encoder_bytes : -1;
  }
  return CreateCudaBackend(cuda_options);
}

// Above the CPU backend (priority 0): "auto" picks the GPU when one starts.
[[maybe_unused]] const bool kRegistered = RegisterBackend(WAAV_GPU_NAME, 100, CreateRegistered);

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  return CudaBackend::Create(options);
}

CudaExtensions* GetCudaExtensions(Backend& backend) {
  return dynamic_cast<CudaExtensions*>(&backend);
}

}  // namespace waav
