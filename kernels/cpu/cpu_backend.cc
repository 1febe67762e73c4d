// CpuBackend: validation, memory, graph capture and dispatch to the kernels in kernels.h.
//
// This file is compiled for the baseline target (no -march), so that the registrar and the
// feature check in the factory run on any x86-64 CPU; only the kernel sources use AVX2.
#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"
#include "engine/runtime/thread_pool.h"
#include "kernels/cpu/cpu_memory.h"
#include "kernels/cpu/head_scores.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/scratch.h"
#include "spdlog/spdlog.h"

namespace waav {
namespace {

using cpu::CpuMemoryPool;
using cpu::KernelContext;
using cpu::Scratch;
using waav::ThreadPool;

// What kernels run with, shared by the backend and the closures of captured graphs so that a
// graph stays runnable after the backend is gone.
struct ExecState {
  explicit ExecState(int num_threads) : pool(num_threads), scratch(pool.num_threads() + 1) {}
  KernelContext context() { return {&pool, &scratch}; }
  // ResourceExhausted if a kernel could not get scratch memory.
  absl::Status ScratchStatus(const char* op) {
    if (!scratch.TakeFailure()) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(op, ": out of host memory for scratch space"));
  }
  ThreadPool pool;
  Scratch scratch;
};

using Node = std::function<absl::Status()>;

// BackendStats' counters, shared with the graphs (which may outlive the backend). Relaxed: they
// order nothing, and a reader on another thread only needs each value eventually.
struct DispatchCounters {
  std::atomic<uint64_t> kernel_launches{0};
  std::atomic<uint64_t> graph_replays{0};
};

class CpuGraph final : public Graph {
 public:
  CpuGraph(std::vector<Node> nodes, std::shared_ptr<DispatchCounters> counters)
      : nodes_(std::move(nodes)), counters_(std::move(counters)) {}
  absl::Status Replay() override {
    counters_->graph_replays.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      absl::Status status = nodes_[i]();
      if (!status.ok()) {
        return absl::Status(status.code(), absl::StrCat("graph node ", i, " of ", nodes_.size(),
                                                        ": ", status.message()));
      }
    }
    return absl::OkStatus();
  }
  int num_nodes() const override { return static_cast<int>(nodes_.size()); }

 private:
  std::vector<Node> nodes_;
  std::shared_ptr<DispatchCounters> counters_;
};

// Physical memory of the host, or 0 when the system does not say.
uint64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// ---- Validation helpers -----------------------------------------------------------------------

absl::Status Invalid(const char* op, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", message));
}

std::string DescribeDTypes(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) absl::StrAppend(&s, s.empty() ? "" : " or ", std::string(DTypeName(d)));
  return s;
}

// `t` is defined, on the CPU, of one of `dtypes`, and of rank `rank` (or at least `min_rank`
// when rank < 0).
absl::Status CheckTensor(const char* op, const char* name, const Tensor& t,
                         std::initializer_list<DType> dtypes, int rank, int min_rank = 0) {
  if (!t.defined()) return Invalid(op, absl::StrCat(name, " is an undefined tensor"));
  if (t.device() != DeviceKind::kCpu) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " lives on ",
                                    std::string(DeviceKindName(t.device())), ", not cpu"));
  }
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || t.dtype() == d;
  if (!dtype_ok) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must be ", DescribeDTypes(dtypes)));
  }
  if (rank >= 0 && t.rank() != rank) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have rank ", rank));
  }
  if (rank < 0 && t.rank() < min_rank) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have rank >= ", min_rank));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const char* op, const char* name, const Tensor& t, const Shape& expected,
                        const std::string& why) {
  if (t.shape() == expected) return absl::OkStatus();
  return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have shape ", expected.ToString(),
                                  " (", why, ")"));
}

bool Overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  return a.size_bytes() > 0 && b.size_bytes() > 0 && pa < pb + b.size_bytes() &&
         pb < pa + a.size_bytes();
}

// Output `y` may be exactly `x` (in place) but must not partially overlap it.
absl::Status CheckInPlaceOrDisjoint(const char* op, const char* y_name, const Tensor& y,
                                    const char* x_name, const Tensor& x) {
  if (y.data() == x.data() && y.size_bytes() == x.size_bytes()) return absl::OkStatus();
  if (!Overlap(x, y)) return absl::OkStatus();
  return Invalid(op, absl::StrCat(y_name, " ", y.Describe(), " partially overlaps ", x_name, " ",
                                  x.Describe()));
}

absl::Status CheckDisjoint(const char* op, const char* y_name, const Tensor& y, const char* x_name,
                           const Tensor& x) {
  if (!Overlap(x, y)) return absl::OkStatus();
  return Invalid(op,
                 absl::StrCat(y_name, " ", y.Describe(), " overlaps ", x_name, " ", x.Describe()));
}

// OpenBLAS takes 32-bit sizes.
absl::Status CheckBlasSize(const char* op, const char* what, int64_t value) {
  if (value <= std::numeric_limits<int>::max()) return absl::OkStatus();
  return Invalid(op, absl::StrCat(what, " = ", value, " exceeds the 32-bit limit of BLAS"));
}

absl::Status CheckActivation(const char* op, Activation act) {
  switch (act) {
    case Activation::kNone:
    case Activation::kGelu:
    case Activation::kRelu:
    case Activation::kSigmoid:
      return absl::OkStatus();
  }
  return Invalid(op, absl::StrCat("activation ", static_cast<int>(act),
                                  " is not one of none, gelu, relu, sigmoid"));
}

// The epilogues that LinearKernel and Conv1dKernel do not fuse (they fuse GELU), as one more pass
// over y.
void ApplyEpilogue(const KernelContext& ctx, Activation act, float* y, int64_t n) {
  if (act == Activation::kRelu) cpu::ActivationKernel(ctx, cpu::Pointwise::kRelu, y, y, n);
  if (act == Activation::kSigmoid) cpu::ActivationKernel(ctx, cpu::Pointwise::kSigmoid, y, y, n);
}

Shape WithLastDim(const Shape& shape, int64_t last) {
  std::vector<int64_t> dims = shape.dims();
  dims.back() = last;
  return Shape(std::move(dims));
}

// ---- The backend ------------------------------------------------------------------------------

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : state_(std::make_shared<ExecState>(options.num_threads)),
        memory_(std::make_shared<CpuMemoryPool>()) {
    // One OpenBLAS thread: each of our threads calls sgemm on its own block, and OpenBLAS's own
    // spinning workers would otherwise compete with ours for the same cores.
    openblas_set_num_threads(1);
    WarnAboutOpenBlasCore();
  }

  std::string_view name() const override { return "cpu"; }
  DeviceKind device() const override { return DeviceKind::kCpu; }
  std::string Describe() const override {
    return absl::StrCat("cpu: ", state_->pool.num_threads(),
                        " threads, AVX2/FMA/F16C kernels, OpenBLAS ", openblas_get_corename());
  }
  // Every op but the optional fusions, which would save nothing here (the engine calls Linear
  // and Add, one Linear per projection, and the decoder step op by op, as before), and f16
  // activations (f32 throughout).
  bool supports(Op op) const override {
    return op != Op::kLinearResidual && op != Op::kLinearPlanes && op != Op::kLinearPlanesAppend &&
           op != Op::kHalfActivations && op != Op::kDecoderStep;
  }

  // ---- Memory ---------------------------------------------------------------------------------

  absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype) override {
    RETURN_IF_ERROR(NotCapturing("Allocate"));
    return cpu::AllocateCpuTensor(memory_, shape, dtype);
  }

  absl::Status CopyFromHost(const void* src, size_t bytes, const Tensor& dst) override {
    RETURN_IF_ERROR(NotCapturing("CopyFromHost"));
    RETURN_IF_ERROR(CheckTensor("CopyFromHost", "dst", dst,
                                {DType::kF32, DType::kF16, DType::kI32, DType::kI8}, -1));
    if (bytes != dst.size_bytes()) {
      return Invalid("CopyFromHost", absl::StrCat(bytes, " bytes given for dst ", dst.Describe(),
                                                  " of ", dst.size_bytes(), " bytes"));
    }
    if (bytes > 0 && src == nullptr) return Invalid("CopyFromHost", "src is null");
    if (bytes > 0) std::memcpy(dst.data(), src, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const Tensor& src, void* dst, size_t bytes) override {
    RETURN_IF_ERROR(NotCapturing("CopyToHost"));
    RETURN_IF_ERROR(CheckTensor("CopyToHost", "src", src,
                                {DType::kF32, DType::kF16, DType::kI32, DType::kI8}, -1));
    if (bytes != src.size_bytes()) {
      return Invalid("CopyToHost", absl::StrCat(bytes, " bytes given for src ", src.Describe(),
                                                " of ", src.size_bytes(), " bytes"));
    }
    if (bytes > 0 && dst == nullptr) return Invalid("CopyToHost", "dst is null");
    if (bytes > 0) std::memcpy(dst, src.data(), bytes);
    return absl::OkStatus();
  }

  absl::Status Copy(const Tensor& src, const Tensor& dst) override {
    constexpr const char* kOp = "Copy";
    RETURN_IF_ERROR(
        CheckTensor(kOp, "src", src, {DType::kF32, DType::kF16, DType::kI32, DType::kI8}, -1));
    RETURN_IF_ERROR(CheckTensor(kOp, "dst", dst, {src.dtype()}, -1));
    if (src.numel() != dst.numel()) {
      return Invalid(kOp, absl::StrCat("src ", src.Describe(), " and dst ", dst.Describe(),
                                       " differ in element count"));
    }
    return Submit([src, dst]() {
      if (src.size_bytes() > 0) std::memmove(dst.data(), src.data(), src.size_bytes());
      return absl::OkStatus();
    });
  }

  absl::Status Synchronize() override { return NotCapturing("Synchronize"); }

  // ---- Kernels --------------------------------------------------------------------------------

  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor* bias, Activation act,
                      const Tensor& y) override {
    constexpr const char* kOp = "Linear";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "weight", weight, {DType::kF32, DType::kF16}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1, 1));
    const int64_t n = weight.dim(0), k = weight.dim(1);
    if (x.dim(-1) != k) {
      return Invalid(kOp, absl::StrCat("x ", x.Describe(), " and weight ", weight.Describe(),
                                       " disagree on the input size (", x.dim(-1), " vs ", k, ")"));
    }
    RETURN_IF_ERROR(
        CheckShape(kOp, "y", y, WithLastDim(x.shape(), n), "x's leading dims, weight's rows"));
    Tensor b;
    if (bias != nullptr) {
      b = *bias;
      RETURN_IF_ERROR(CheckTensor(kOp, "bias", b, {DType::kF32}, 1));
      RETURN_IF_ERROR(CheckShape(kOp, "bias", b, Shape{n}, "one per output"));
      RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "bias", b));
    }
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "weight", weight));
    const int64_t m = k == 0 ? 0 : x.numel() / k;
    RETURN_IF_ERROR(CheckBlasSize(kOp, "rows", m));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "outputs", n));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "inputs", k));
    RETURN_IF_ERROR(CheckActivation(kOp, act));
    const bool gelu = act == Activation::kGelu;
    return Submit([state = state_, x, weight, b, y, m, n, k, gelu, act]() {
      if (k == 0) {  // an empty sum: y = act(bias)
        float* out = y.data_as<float>();
        const int64_t rows = y.numel() / std::max<int64_t>(n, 1);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            const float v = b.defined() ? b.data_as<float>()[j] : 0.0f;
            out[r * n + j] = gelu ? 0.5f * v * (1.0f + std::erf(v * 0.70710678f)) : v;
          }
        }
        ApplyEpilogue(state->context(), act, out, y.numel());
        return absl::OkStatus();
      }
      cpu::LinearKernel(state->context(), x.data_as<float>(), m, k, weight.data(), weight.dtype(),
                        n, b.defined() ? b.data_as<float>() : nullptr, gelu, y.data_as<float>());
      ApplyEpilogue(state->context(), act, y.data_as<float>(), y.numel());
      return state->ScratchStatus(kOp);
    });
  }

  absl::Status Conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride,
                      int padding, Activation act, const Tensor& y) override {
    constexpr const char* kOp = "Conv1d";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "weight", weight, {DType::kF32, DType::kF16}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "bias", bias, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, 3));
    if (stride < 1 || padding < 0) {
      return Invalid(
          kOp, absl::StrCat("stride ", stride, " must be >= 1 and padding ", padding, " >= 0"));
    }
    cpu::Conv1dShape s{x.dim(0),      x.dim(1), x.dim(2), weight.dim(0),
                       weight.dim(2), 0,        stride,   padding};
    if (weight.dim(1) != s.in_channels || s.kernel_size < 1) {
      return Invalid(kOp, absl::StrCat("weight ", weight.Describe(), " must be [Cout, ",
                                       s.in_channels, ", K>=1] for x ", x.Describe()));
    }
    RETURN_IF_ERROR(CheckShape(kOp, "bias", bias, Shape{s.out_channels}, "one per output channel"));
    const int64_t span = s.time + 2 * int64_t{padding} - s.kernel_size;
    if (span < 0) {
      return Invalid(kOp,
                     absl::StrCat("x ", x.Describe(), " with padding ", padding,
                                  " is shorter than the kernel of weight ", weight.Describe()));
    }
    s.out_time = span / stride + 1;
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, Shape{s.batch, s.out_time, s.out_channels},
                               "[B, (T + 2·padding − K) / stride + 1, Cout]"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "weight", weight));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "bias", bias));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "Cin·K", s.in_channels * s.kernel_size));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "Cout", s.out_channels));
    RETURN_IF_ERROR(CheckActivation(kOp, act));
    const bool gelu = act == Activation::kGelu;
    return Submit([state = state_, x, weight, bias, y, s, gelu, act]() {
      cpu::Conv1dKernel(state->context(), x.data_as<float>(), weight.data(), weight.dtype(),
                        bias.data_as<float>(), s, gelu, y.data_as<float>());
      ApplyEpilogue(state->context(), act, y.data_as<float>(), y.numel());
      return state->ScratchStatus(kOp);
    });
  }

  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         const Tensor& y) override {
    constexpr const char* kOp = "LayerNorm";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "gamma", gamma, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "beta", beta, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1, 1));
    const int64_t cols = x.dim(-1);
    RETURN_IF_ERROR(CheckShape(kOp, "gamma", gamma, Shape{cols}, "x's last dim"));
    RETURN_IF_ERROR(CheckShape(kOp, "beta", beta, Shape{cols}, "x's last dim"));
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "gamma", gamma));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "beta", beta));
    if (!(eps >= 0.0f) || std::isinf(eps)) {
      return Invalid(kOp, absl::StrCat("eps ", eps, " must be finite and >= 0"));
    }
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    return Submit([state = state_, x, gamma, beta, y, rows, cols, eps]() {
      cpu::LayerNormKernel(state->context(), x.data_as<float>(), rows, cols, gamma.data_as<float>(),
                           beta.data_as<float>(), eps, y.data_as<float>());
      return absl::OkStatus();
    });
  }

  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& y) override {
    RETURN_IF_ERROR(checks::ValidateAdd(DeviceKind::kCpu, a, b, y));
    return Submit([state = state_, a, b, y]() {
      cpu::AddKernel(state->context(), a.data_as<float>(), b.data_as<float>(), y.data_as<float>(),
                     y.numel(), b.numel());
      return absl::OkStatus();
    });
  }

  absl::Status Gelu(const Tensor& x, const Tensor& y) override {
    constexpr const char* kOp = "Gelu";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1));
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
    return Submit([state = state_, x, y]() {
      cpu::GeluKernel(state->context(), x.data_as<float>(), y.data_as<float>(), y.numel());
      return absl::OkStatus();
    });
  }

  absl::Status Attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor* kv_lengths, int num_heads, float scale, bool causal,
                         const Tensor& out) override {
    constexpr const char* kOp = "Attention";
    RETURN_IF_ERROR(CheckTensor(kOp, "q", q, {DType::kF32}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "k", k, {DType::kF32}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "v", v, {DType::kF32}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "out", out, {DType::kF32}, 3));
    const int64_t batch = q.dim(0), tq = q.dim(1), width = q.dim(2), tk = k.dim(1);
    if (k.dim(0) != batch || k.dim(2) != width) {
      return Invalid(kOp, absl::StrCat("k ", k.Describe(), " must be [", batch, ", Tk, ", width,
                                       "] for q ", q.Describe()));
    }
    RETURN_IF_ERROR(CheckShape(kOp, "v", v, k.shape(), "same as k"));
    RETURN_IF_ERROR(CheckShape(kOp, "out", out, q.shape(), "same as q"));
    if (num_heads < 1 || width % num_heads != 0) {
      return Invalid(kOp, absl::StrCat("num_heads ", num_heads,
                                       " must be >= 1 and divide q's last dim in ", q.Describe()));
    }
    if (!std::isfinite(scale)) return Invalid(kOp, absl::StrCat("scale ", scale, " is not finite"));
    Tensor lengths;
    if (kv_lengths != nullptr) {
      lengths = *kv_lengths;
      RETURN_IF_ERROR(CheckTensor(kOp, "kv_lengths", lengths, {DType::kI32}, 1));
      RETURN_IF_ERROR(CheckShape(kOp, "kv_lengths", lengths, Shape{batch}, "one per batch row"));
      RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "kv_lengths", lengths));
    }
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "q", q));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "k", k));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "v", v));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "Tk", tk));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "q's last dim", width));
    const cpu::AttentionShape s{batch, tq, tk, num_heads, width / num_heads};
    return Submit([state = state_, q, k, v, lengths, out, s, scale, causal]() {
      const int32_t* lens = nullptr;
      if (lengths.defined()) {
        lens = lengths.data_as<int32_t>();
        for (int64_t b = 0; b < s.batch; ++b) {
          if (lens[b] < 0 || lens[b] > s.kv_len) {
            return Invalid(kOp, absl::StrCat("kv_lengths[", b, "] = ", lens[b], " is outside [0, ",
                                             s.kv_len, "] for k ", k.Describe()));
          }
        }
      }
      cpu::AttentionKernel(state->context(), q.data_as<float>(), k.data_as<float>(),
                           v.data_as<float>(), lens, s, scale, causal, out.data_as<float>());
      return state->ScratchStatus(kOp);
    });
  }

  absl::Status SharedKvAttention(const Tensor& q, const Tensor& kv, const Tensor* kv_scales,
                                 int num_heads, float scale, const Tensor& out) override {
    constexpr const char* kOp = "SharedKvAttention";
    ASSIGN_OR_RETURN(
        const checks::SharedKvAttentionDims d,
        checks::ValidateSharedKvAttention(DeviceKind::kCpu, q, kv, kv_scales, num_heads, scale, out,
                                          /*half_activations=*/false,
                                          /*quantized=*/true));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "Tk", d.kv_len));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "Tq · num_heads", d.q_len * d.heads));
    const cpu::SharedKvAttentionShape s{d.batch, d.q_len, d.kv_len, d.heads, d.width};
    const Tensor scales = kv_scales != nullptr ? *kv_scales : Tensor();
    return Submit([state = state_, q, kv, scales, out, s, scale]() {
      cpu::SharedKvSource source;
      if (scales.defined()) {
        source.i8 = kv.data_as<int8_t>();
        source.scales = scales.data_as<float>();
      } else {
        source.f32 = kv.data_as<float>();
      }
      cpu::SharedKvAttentionKernel(state->context(), q.data_as<float>(), source, s, scale,
                                   out.data_as<float>());
      return state->ScratchStatus(kOp);
    });
  }

  absl::Status QuantizeChannels(const Tensor& x, const Tensor& q, const Tensor& scales) override {
    ASSIGN_OR_RETURN(const checks::QuantizeChannelsDims d,
                     checks::ValidateQuantizeChannels(DeviceKind::kCpu, x, q, scales));
    const cpu::QuantizeChannelsShape s{d.batch, d.rows, d.channels};
    return Submit([state = state_, x, q, scales, s]() {
      cpu::QuantizeChannelsKernel(state->context(), x.data_as<float>(), s, q.data_as<int8_t>(),
                                  scales.data_as<float>());
      return absl::OkStatus();
    });
  }

  absl::Status HeadScores(const Tensor& q, const Tensor& k, int head_dim, float scale,
                          absl::Span<const HeadScoresItem> items, const Tensor& out) override {
    ASSIGN_OR_RETURN(
        const checks::HeadScoresDims d,
        checks::ValidateHeadScores(DeviceKind::kCpu, q, k, head_dim, scale, items, out));
    const cpu::HeadScoresShape s{d.q_len, d.k_len, d.channels, head_dim};
    return Submit([state = state_, q, k, out, s, scale,
                   held = std::vector<HeadScoresItem>(items.begin(), items.end())]() {
      cpu::HeadScoresKernel(state->context(), q.data_as<float>(), k.data(), k.dtype(), s, scale,
                            held, out.data_as<float>());
      return absl::OkStatus();
    });
  }

  absl::Status WriteRows(const Tensor& src, const Tensor& positions, const Tensor& dst) override {
    constexpr const char* kOp = "WriteRows";
    RETURN_IF_ERROR(
        CheckTensor(kOp, "src", src, {DType::kF32, DType::kF16, DType::kI32, DType::kI8}, 3));
    RETURN_IF_ERROR(CheckTensor(kOp, "positions", positions, {DType::kI32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "dst", dst, {src.dtype()}, 3));
    const int64_t batch = src.dim(0), rows = src.dim(1), channels = src.dim(2);
    if (dst.dim(0) != batch || dst.dim(2) != channels) {
      return Invalid(kOp, absl::StrCat("dst ", dst.Describe(), " must be [", batch, ", L, ",
                                       channels, "] for src ", src.Describe()));
    }
    RETURN_IF_ERROR(CheckShape(kOp, "positions", positions, Shape{batch}, "one per batch row"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "dst", dst, "src", src));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "dst", dst, "positions", positions));
    return Submit([src, positions, dst, batch, rows, channels]() {
      const int32_t* pos = positions.data_as<int32_t>();
      const int64_t capacity = dst.dim(1);
      for (int64_t b = 0; b < batch; ++b) {
        if (pos[b] < 0 || pos[b] + rows > capacity) {
          return Invalid(
              kOp, absl::StrCat("positions[", b, "] = ", pos[b], " with ", rows, " rows of src ",
                                src.Describe(), " does not fit dst ", dst.Describe()));
        }
      }
      const size_t row_bytes = static_cast<size_t>(channels) * SizeOf(src.dtype());
      const char* s = static_cast<const char*>(src.data());
      char* d = static_cast<char*>(dst.data());
      for (int64_t b = 0; b < batch; ++b) {
        std::memcpy(d + static_cast<size_t>(b * capacity + pos[b]) * row_bytes,
                    s + static_cast<size_t>(b * rows) * row_bytes,
                    static_cast<size_t>(rows) * row_bytes);
      }
      return absl::OkStatus();
    });
  }

  absl::Status Embed(const Tensor& tokens, const Tensor& start_positions, const Tensor& token_table,
                     const Tensor& position_table, const Tensor& y) override {
    constexpr const char* kOp = "Embed";
    RETURN_IF_ERROR(CheckTensor(kOp, "tokens", tokens, {DType::kI32}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "start_positions", start_positions, {DType::kI32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "token_table", token_table, {DType::kF32, DType::kF16}, 2));
    RETURN_IF_ERROR(
        CheckTensor(kOp, "position_table", position_table, {DType::kF32, DType::kF16}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, 3));
    const int64_t batch = tokens.dim(0), time = tokens.dim(1), channels = token_table.dim(1);
    RETURN_IF_ERROR(
        CheckShape(kOp, "start_positions", start_positions, Shape{batch}, "one per batch row"));
    if (position_table.dim(1) != channels) {
      return Invalid(kOp,
                     absl::StrCat("position_table ", position_table.Describe(), " and token_table ",
                                  token_table.Describe(), " differ in width"));
    }
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, Shape{batch, time, channels}, "[B, T, C]"));
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"tokens", &tokens},
                                  {"start_positions", &start_positions},
                                  {"token_table", &token_table},
                                  {"position_table", &position_table}}) {
      RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, name, *t));
    }
    return Submit([state = state_, tokens, start_positions, token_table, position_table, y, batch,
                   time, channels]() {
      const int32_t* tok = tokens.data_as<int32_t>();
      const int32_t* start = start_positions.data_as<int32_t>();
      const int64_t vocab = token_table.dim(0), max_positions = position_table.dim(0);
      for (int64_t i = 0; i < batch * time; ++i) {
        if (tok[i] < 0 || tok[i] >= vocab) {
          return Invalid(kOp, absl::StrCat("tokens[", i / time, ", ", i % time, "] = ", tok[i],
                                           " is outside token_table ", token_table.Describe()));
        }
      }
      for (int64_t b = 0; b < batch; ++b) {
        if (start[b] < 0 || start[b] + time > max_positions) {
          return Invalid(
              kOp, absl::StrCat("start_positions[", b, "] = ", start[b], " with ", time,
                                " tokens is outside position_table ", position_table.Describe()));
        }
      }
      cpu::EmbedKernel(state->context(), tok, start, batch, time, token_table.data(),
                       token_table.dtype(), position_table.data(), position_table.dtype(), channels,
                       y.data_as<float>());
      return absl::OkStatus();
    });
  }

  absl::Status LogSoftmax(const Tensor& x, const Tensor& y) override {
    constexpr const char* kOp = "LogSoftmax";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
    const int64_t cols = x.dim(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    return Submit([state = state_, x, y, rows, cols]() {
      cpu::LogSoftmaxKernel(state->context(), x.data_as<float>(), rows, cols, y.data_as<float>());
      return state->ScratchStatus(kOp);
    });
  }

  // ---- Optional kernels (greedy decoding) ----------------------------------------------------

  // The host loop of greedy sampling, row by row in token order (backend.h): its sums equal a
  // sequential f64 log-sum-exp over the masked row bit for bit.
  absl::Status ArgmaxLogSumExp(const Tensor& logits, const Tensor& masks, const Tensor& mask_index,
                               const Tensor& out) override {
    constexpr const char* kOp = "ArgmaxLogSumExp";
    ASSIGN_OR_RETURN(
        const checks::ArgmaxDims d,
        checks::ValidateArgmaxLogSumExp(DeviceKind::kCpu, logits, masks, mask_index, out));
    return Submit([logits, masks, mask_index, out, d]() {
      const int32_t* index = mask_index.data_as<int32_t>();
      for (int64_t b = 0; b < d.rows; ++b) {
        if (index[b] < -1 || index[b] >= d.num_masks) {
          return Invalid(kOp, absl::StrCat("mask_index[", b, "] = ", index[b], " is outside [-1, ",
                                           d.num_masks, ") of masks ", masks.Describe()));
        }
      }
      constexpr float kNegInf = -std::numeric_limits<float>::infinity();
      for (int64_t b = 0; b < d.rows; ++b) {
        if (index[b] < 0) continue;
        const float* x = logits.data_as<float>() + b * d.cols;
        const auto* bits =
            reinterpret_cast<const uint32_t*>(masks.data_as<int32_t>()) + index[b] * d.mask_words;
        auto allowed = [bits](int64_t t) { return ((bits[t >> 5] >> (t & 31)) & 1u) == 0; };
        float best = kNegInf;
        int64_t best_id = 0;
        for (int64_t t = 0; t < d.cols; ++t) {
          if (allowed(t) && x[t] > best) {
            best = x[t];
            best_id = t;
          }
        }
        double sum = 0;
        if (best != kNegInf) {
          for (int64_t t = 0; t < d.cols; ++t) {
            if (allowed(t)) sum += std::exp(static_cast<double>(x[t] - best));
          }
        }
        float* o = out.data_as<float>() + b * 5;
        o[0] = static_cast<float>(best_id);
        o[1] = best;
        SplitF64(sum, o + 2);
      }
      return absl::OkStatus();
    });
  }

  absl::Status FeedChoices(const Tensor& choices, const Tensor& mask_index, int32_t max_position,
                           const Tensor& tokens, const Tensor& positions,
                           const Tensor& lengths) override {
    constexpr const char* kOp = "FeedChoices";
    ASSIGN_OR_RETURN(const int64_t rows,
                     checks::ValidateFeedChoices(DeviceKind::kCpu, choices, mask_index,
                                                 max_position, tokens, positions, lengths));
    return Submit([choices, mask_index, max_position, tokens, positions, lengths, rows]() {
      const float* chosen = choices.data_as<float>();
      const int32_t* index = mask_index.data_as<int32_t>();
      for (int64_t b = 0; b < rows; ++b) {
        const float token = chosen[b * 5];
        if (index[b] >= 0 &&
            !(token >= 0.0f && token < 16777216.0f && token == std::floor(token))) {
          return Invalid(kOp, absl::StrCat("choices[", b, "][0] = ", token,
                                           " is not a token id in [0, 2^24)"));
        }
      }
      for (int64_t b = 0; b < rows; ++b) {
        if (index[b] < 0) continue;
        int32_t& position = positions.data_as<int32_t>()[b];
        position = static_cast<int32_t>(std::min<int64_t>(int64_t{position} + 1, max_position));
        lengths.data_as<int32_t>()[b] = position + 1;
        tokens.data_as<int32_t>()[b] = static_cast<int32_t>(chosen[b * 5]);
      }
      return absl::OkStatus();
    });
  }

  // ---- Optional kernels (Silero VAD) ----------------------------------------------------------

  absl::Status Activate(const Tensor& x, Activation act, const Tensor& y) override {
    constexpr const char* kOp = "Activate";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1));
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
    RETURN_IF_ERROR(CheckActivation(kOp, act));
    return Submit([state = state_, x, y, act]() {
      const float* in = x.data_as<float>();
      float* out = y.data_as<float>();
      switch (act) {
        case Activation::kNone:
          if (in != out && y.size_bytes() > 0) std::memcpy(out, in, y.size_bytes());
          break;
        case Activation::kGelu:
          cpu::GeluKernel(state->context(), in, out, y.numel());
          break;
        case Activation::kRelu:
          cpu::ActivationKernel(state->context(), cpu::Pointwise::kRelu, in, out, y.numel());
          break;
        case Activation::kSigmoid:
          cpu::ActivationKernel(state->context(), cpu::Pointwise::kSigmoid, in, out, y.numel());
          break;
      }
      return absl::OkStatus();
    });
  }

  absl::Status ComplexMagnitude(const Tensor& x, const Tensor& y) override {
    constexpr const char* kOp = "ComplexMagnitude";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {DType::kF32}, -1, 1));
    if (x.dim(-1) % 2 != 0) {
      return Invalid(kOp, absl::StrCat("x ", x.Describe(),
                                       " must have an even last dim (real parts, then imaginary)"));
    }
    const int64_t half = x.dim(-1) / 2;
    RETURN_IF_ERROR(CheckShape(kOp, "y", y, WithLastDim(x.shape(), half), "x's last dim halved"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x));
    const int64_t rows = half == 0 ? 0 : x.numel() / (2 * half);
    return Submit([state = state_, x, y, rows, half]() {
      cpu::ComplexMagnitudeKernel(state->context(), x.data_as<float>(), rows, half,
                                  y.data_as<float>());
      return absl::OkStatus();
    });
  }

  absl::Status LstmCell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& weight,
                        const Tensor& bias, const Tensor& h_out, const Tensor& c_out) override {
    constexpr const char* kOp = "LstmCell";
    RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {DType::kF32}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "h", h, {DType::kF32}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "c", c, {DType::kF32}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "weight", weight, {DType::kF32, DType::kF16}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "bias", bias, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckTensor(kOp, "h_out", h_out, {DType::kF32}, 2));
    RETURN_IF_ERROR(CheckTensor(kOp, "c_out", c_out, {DType::kF32}, 2));
    const cpu::LstmShape s{x.dim(0), x.dim(1), h.dim(1)};
    RETURN_IF_ERROR(CheckShape(kOp, "h", h, Shape{s.batch, s.hidden}, "[B, H]"));
    RETURN_IF_ERROR(CheckShape(kOp, "c", c, h.shape(), "same as h"));
    RETURN_IF_ERROR(CheckShape(kOp, "weight", weight, Shape{4 * s.hidden, s.input + s.hidden},
                               "[4H, I + H]: weight_ih and weight_hh side by side"));
    RETURN_IF_ERROR(CheckShape(kOp, "bias", bias, Shape{4 * s.hidden}, "[4H]"));
    RETURN_IF_ERROR(CheckShape(kOp, "h_out", h_out, h.shape(), "same as h"));
    RETURN_IF_ERROR(CheckShape(kOp, "c_out", c_out, h.shape(), "same as h"));
    // The outputs may be the state they replace, nothing else.
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "h_out", h_out, "h", h));
    RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "c_out", c_out, "c", c));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "h_out", h_out, "c_out", c_out));
    for (const auto& [out_name, out] :
         {std::pair<const char*, const Tensor*>{"h_out", &h_out}, {"c_out", &c_out}}) {
      for (const auto& [in_name, in] :
           {std::pair<const char*, const Tensor*>{"x", &x}, {"weight", &weight}, {"bias", &bias}}) {
        RETURN_IF_ERROR(CheckDisjoint(kOp, out_name, *out, in_name, *in));
      }
    }
    RETURN_IF_ERROR(CheckDisjoint(kOp, "h_out", h_out, "c", c));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "c_out", c_out, "h", h));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "I + H", s.input + s.hidden));
    RETURN_IF_ERROR(CheckBlasSize(kOp, "4H", 4 * s.hidden));
    // Workspace for [x | h] and the gates, allocated here so that a captured graph owns its own.
    ASSIGN_OR_RETURN(Tensor xh,
                     cpu::AllocateCpuTensor(memory_, {s.batch, s.input + s.hidden}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor gates,
                     cpu::AllocateCpuTensor(memory_, {s.batch, 4 * s.hidden}, DType::kF32));
    return Submit([state = state_, s, x, h, c, weight, bias, h_out, c_out, xh, gates]() {
      cpu::LstmCellKernel(state->context(), s, x.data_as<float>(), h.data_as<float>(),
                          c.data_as<float>(), weight.data(), weight.dtype(), bias.data_as<float>(),
                          xh.data_as<float>(), gates.data_as<float>(), h_out.data_as<float>(),
                          c_out.data_as<float>());
      return state->ScratchStatus(kOp);
    });
  }

  // ---- Graph capture --------------------------------------------------------------------------

  absl::Status BeginCapture() override {
    if (capturing_) return absl::FailedPreconditionError("BeginCapture: already capturing");
    capturing_ = true;
    captured_.clear();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Graph>> EndCapture() override {
    if (!capturing_) return absl::FailedPreconditionError("EndCapture: no capture in progress");
    capturing_ = false;
    return std::unique_ptr<Graph>(
        std::make_unique<CpuGraph>(std::exchange(captured_, {}), counters_));
  }

  // ---- Statistics -----------------------------------------------------------------------------

  BackendStats stats() const override {
    BackendStats s;
    s.kernel_launches = counters_->kernel_launches.load(std::memory_order_relaxed);
    s.graph_replays = counters_->graph_replays.load(std::memory_order_relaxed);
    s.memory_in_use_bytes = memory_->in_use_bytes();
    s.memory_held_bytes = s.memory_in_use_bytes + memory_->cached_bytes();
    s.memory_capacity_bytes = memory_capacity_bytes_;
    return s;
  }

 private:
  // Runs `node` now, or records it while capturing.
  template <typename F>
  absl::Status Submit(F&& node) {
    if (capturing_) {
      captured_.emplace_back(std::forward<F>(node));
      return absl::OkStatus();
    }
    // One submitting thread at a time (backend.h). Two threads would share the worker pool and
    // can wait on each other's chunks forever; report the misuse instead of hanging.
    if (busy_.exchange(true, std::memory_order_acquire)) {
      return absl::FailedPreconditionError(
          "the CPU backend was used from two threads at once; create one backend per thread "
          "that submits work");
    }
    counters_->kernel_launches.fetch_add(1, std::memory_order_relaxed);
    absl::Status status = node();
    busy_.store(false, std::memory_order_release);
    return status;
  }

  absl::Status NotCapturing(const char* op) const {
    if (!capturing_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(op, " is not allowed while a graph is being captured"));
  }

  static void WarnAboutOpenBlasCore() {
    static std::once_flag once;
    std::call_once(once, [] {
      const std::string core = openblas_get_corename();
      const bool avx512_core = core.find("SkylakeX") != std::string::npos ||
                               core.find("Cooperlake") != std::string::npos ||
                               core.find("SapphireRapids") != std::string::npos;
      if (__builtin_cpu_supports("avx512f") && !avx512_core) {
        spdlog::warn(
            "OpenBLAS uses its {} kernels on this AVX-512 CPU; OPENBLAS_CORETYPE=SkylakeX "
            "(set by waav's binaries through EnsureOpenBlasCoreType) roughly doubles GEMM "
            "throughput",
            core);
      }
    });
  }

  std::shared_ptr<ExecState> state_;
  std::shared_ptr<CpuMemoryPool> memory_;
  std::shared_ptr<DispatchCounters> counters_ = std::make_shared<DispatchCounters>();
  const uint64_t memory_capacity_bytes_ = HostMemoryBytes();
  bool capturing_ = false;
  std::atomic<bool> busy_{false};
  std::vector<Node> captured_;
};

absl::StatusOr<std::unique_ptr<Backend>> CreateChecked(const BackendOptions& options) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !__builtin_cpu_supports("f16c")) {
    return absl::UnavailableError("cpu backend needs AVX2, FMA and F16C (x86-64-v3)");
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads ", options.num_threads, " must be >= 0 (0: all cores)"));
  }
  return CreateCpuBackend(options);
}

[[maybe_unused]] const bool kRegistered = RegisterBackend("cpu", 0, CreateChecked);

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace waav
