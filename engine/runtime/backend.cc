#include "engine/runtime/backend.h"

#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"

namespace waav {

namespace {

absl::Status NotImplemented(std::string_view backend, const char* op) {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(backend), "' does not implement ", op));
}

}  // namespace

absl::Status Backend::Activate(const Tensor&, Activation, const Tensor&) {
  return NotImplemented(name(), "Activate");
}

absl::Status Backend::ComplexMagnitude(const Tensor&, const Tensor&) {
  return NotImplemented(name(), "ComplexMagnitude");
}

absl::Status Backend::LstmCell(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, const Tensor&, const Tensor&) {
  return NotImplemented(name(), "LstmCell");
}

absl::Status Backend::ArgmaxLogSumExp(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return NotImplemented(name(), "ArgmaxLogSumExp");
}

absl::Status Backend::FeedChoices(const Tensor&, const Tensor&, int32_t, const Tensor&,
                                  const Tensor&, const Tensor&) {
  return NotImplemented(name(), "FeedChoices");
}

absl::Status Backend::LinearResidual(const Tensor&, const Tensor&, const Tensor*, Activation,
                                     const Tensor&, const Tensor&) {
  return NotImplemented(name(), "LinearResidual");
}

absl::Status Backend::LinearPlanes(const Tensor&, const Tensor&, const Tensor*,
                                   absl::Span<const Tensor>) {
  return NotImplemented(name(), "LinearPlanes");
}

absl::Status Backend::LinearPlanesAppend(const Tensor&, const Tensor&, const Tensor*,
                                         absl::Span<const Tensor>, int, const Tensor&) {
  return NotImplemented(name(), "LinearPlanesAppend");
}

absl::Status Backend::SharedKvAttention(const Tensor&, const Tensor&, const Tensor*, int, float,
                                        const Tensor&) {
  return NotImplemented(name(), "SharedKvAttention");
}
absl::Status Backend::QuantizeChannels(const Tensor&, const Tensor&, const Tensor&) {
  return NotImplemented(name(), "QuantizeChannels");
}

absl::Status Backend::HeadScores(const Tensor&, const Tensor&, int, float,
                                 absl::Span<const HeadScoresItem>, const Tensor&) {
  return NotImplemented(name(), "HeadScores");
}

absl::StatusOr<HostBuffer> Backend::AllocateHost(size_t bytes) {
  if (bytes == 0) return HostBuffer();
  constexpr std::align_val_t kAlign{64};
  void* data = ::operator new(bytes, kAlign, std::nothrow);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("AllocateHost: ", bytes, " bytes"));
  }
  return HostBuffer(data, bytes, [](void* p) { ::operator delete (p, std::align_val_t{64}); });
}

absl::Status Backend::CopyFromHostAsync(const HostBuffer& src, size_t bytes, const Tensor& dst,
                                        size_t src_offset) {
  RETURN_IF_ERROR(checks::ValidateHostBufferHolds(src, bytes, src_offset));
  return CopyFromHost(src.data_as<char>() + src_offset, bytes, dst);
}

absl::StatusOr<uint64_t> Backend::CopyToHostAsync(const Tensor& src, const HostBuffer& dst,
                                                  size_t dst_offset) {
  RETURN_IF_ERROR(
      checks::ValidateHostBufferHolds(dst, src.size_bytes(), dst_offset, "CopyToHostAsync"));
  RETURN_IF_ERROR(CopyToHost(src, dst.data_as<char>() + dst_offset, src.size_bytes()));
  return uint64_t{0};
}

absl::Status Backend::WaitForCopy(uint64_t ticket) {
  if (ticket != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WaitForCopy: ticket ", ticket, " was not issued by ", std::string(name())));
  }
  return absl::OkStatus();
}

absl::Status Backend::GatherRows(const Tensor& src, absl::Span<const int64_t> rows,
                                 const Tensor& dst) {
  RETURN_IF_ERROR(checks::ValidateGatherRows(device(), src, rows, dst).status());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSIGN_OR_RETURN(const Tensor from, src.Slice(rows[i], rows[i] + 1));
    ASSIGN_OR_RETURN(const Tensor to,
                     dst.Slice(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1));
    RETURN_IF_ERROR(Copy(from, to));
  }
  return absl::OkStatus();
}

void Backend::SetLaunchHint(LaunchHint) {}

absl::Status Backend::BeginCapture() {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(name()), "' cannot capture graphs"));
}

absl::StatusOr<std::unique_ptr<Graph>> Backend::EndCapture() {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(name()), "' cannot capture graphs"));
}

bool PreparedDecoderStep::ChoosesInStep(const DecoderStepIo&) const { return false; }

absl::Status PreparedDecoderStep::RunAndChoose(const DecoderStepIo&, const DecoderStepChoice&) {
  return absl::UnimplementedError("this decoder step does not make the greedy choice itself");
}

absl::StatusOr<std::unique_ptr<PreparedDecoderStep>> Backend::PrepareDecoderStep(
    const DecoderStepWeights&) {
  return NotImplemented(name(), "PrepareDecoderStep");
}

BackendStats Backend::stats() const { return {}; }

namespace {

// `t` is defined, of `dtype` (or either float type with `any_float`) and of shape `want`.
absl::Status CheckTensor(const std::string& what, const Tensor& t, const Shape& want, DType dtype,
                         bool any_float = false) {
  if (!t.defined())
    return absl::InvalidArgumentError(absl::StrCat("decoder step: ", what, " is missing"));
  const bool dtype_ok =
      any_float ? (t.dtype() == DType::kF32 || t.dtype() == DType::kF16) : t.dtype() == dtype;
  if (!dtype_ok || t.shape() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder step: ", what, " is ", t.Describe(), "; expected ",
                     any_float ? "f32 or f16" : std::string(DTypeName(dtype)), want.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDecoderStepWeights(const DecoderStepWeights& w) {
  const DecoderStepDims& d = w.dims;
  if (d.d_model <= 0 || d.n_heads <= 0 || d.d_model % d.n_heads != 0 || d.ffn_dim <= 0 ||
      d.n_layers <= 0 || d.n_vocab <= 0 || d.n_positions <= 0 || d.n_source <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder step: bad dims (d_model ", d.d_model, ", ", d.n_heads, " heads, ffn ",
                     d.ffn_dim, ", ", d.n_layers, " layers, vocabulary ", d.n_vocab, ", ",
                     d.n_positions, " positions, ", d.n_source, " source positions)"));
  }
  if (static_cast<int>(w.layers.size()) != d.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("decoder step: ", w.layers.size(),
                                                   " layers of weights for dims of ", d.n_layers));
  }
  const int64_t dm = d.d_model, ff = d.ffn_dim;
  const DType f32 = DType::kF32;
  RETURN_IF_ERROR(CheckTensor("token_embedding", w.token_embedding, {d.n_vocab, dm}, f32, true));
  RETURN_IF_ERROR(CheckTensor("position_table", w.position_table, {d.n_positions, dm}, f32));
  RETURN_IF_ERROR(CheckTensor("final_norm_gamma", w.final_norm_gamma, {dm}, f32));
  RETURN_IF_ERROR(CheckTensor("final_norm_beta", w.final_norm_beta, {dm}, f32));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const DecoderStepLayerWeights& l = w.layers[i];
    const std::string p = absl::StrCat("layer ", i, " ");
    const std::pair<const char*, const Tensor*> vectors[] = {
        {"self_norm_gamma", &l.self_norm_gamma},
        {"self_norm_beta", &l.self_norm_beta},
        {"q_b", &l.q_b},
        {"k_b", &l.k_b},
        {"v_b", &l.v_b},
        {"out_b", &l.out_b},
        {"cross_norm_gamma", &l.cross_norm_gamma},
        {"cross_norm_beta", &l.cross_norm_beta},
        {"cross_q_b", &l.cross_q_b},
        {"cross_out_b", &l.cross_out_b},
        {"ffn_norm_gamma", &l.ffn_norm_gamma},
        {"ffn_norm_beta", &l.ffn_norm_beta},
        {"ff2_b", &l.ff2_b}};
    for (const auto& [name, t] : vectors) RETURN_IF_ERROR(CheckTensor(p + name, *t, {dm}, f32));
    RETURN_IF_ERROR(CheckTensor(p + "ff1_b", l.ff1_b, {ff}, f32));
    const std::pair<const char*, const Tensor*> square[] = {{"q_w", &l.q_w},
                                                            {"k_w", &l.k_w},
                                                            {"v_w", &l.v_w},
                                                            {"out_w", &l.out_w},
                                                            {"cross_q_w", &l.cross_q_w},
                                                            {"cross_out_w", &l.cross_out_w}};
    for (const auto& [name, t] : square) {
      RETURN_IF_ERROR(CheckTensor(p + name, *t, {dm, dm}, f32, true));
    }
    RETURN_IF_ERROR(CheckTensor(p + "ff1_w", l.ff1_w, {ff, dm}, f32, true));
    RETURN_IF_ERROR(CheckTensor(p + "ff2_w", l.ff2_w, {dm, ff}, f32, true));
  }
  return absl::OkStatus();
}

absl::Status CheckDecoderStepIo(const DecoderStepDims& d, int max_batch, const DecoderStepIo& io) {
  if (!io.positions.defined() || io.positions.rank() != 1) {
    return absl::InvalidArgumentError("decoder step: positions must be i32 [B]");
  }
  const int64_t b = io.positions.dim(0);
  if (b < 1 || b > max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("decoder step: a batch of ", b,
                                                   " rows (this step takes 1 to ", max_batch, ")"));
  }
  const DType i32 = DType::kI32, f32 = DType::kF32;
  RETURN_IF_ERROR(CheckTensor("positions", io.positions, {b}, i32));
  RETURN_IF_ERROR(CheckTensor("lengths", io.lengths, {b}, i32));
  const Shape tokens = io.tokens.defined() && io.tokens.rank() == 2 ? Shape{b, 1} : Shape{b};
  RETURN_IF_ERROR(CheckTensor("tokens", io.tokens, tokens, i32));
  RETURN_IF_ERROR(CheckTensor("logits", io.logits, {b, d.n_vocab}, f32));
  const size_t layers = static_cast<size_t>(d.n_layers);
  if (io.self_k.size() != layers || io.self_v.size() != layers || io.cross_k.size() != layers ||
      io.cross_v.size() != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder step: caches for ", io.self_k.size(), "/", io.self_v.size(), "/",
                     io.cross_k.size(), "/", io.cross_v.size(),
                     " layers (self K/V, cross K/V); the step has ", d.n_layers));
  }
  for (size_t i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("layer ", i, " ");
    const Shape self{b, d.n_positions, d.d_model}, cross{b, d.n_source, d.d_model};
    RETURN_IF_ERROR(CheckTensor(p + "self_k", io.self_k[i], self, f32));
    RETURN_IF_ERROR(CheckTensor(p + "self_v", io.self_v[i], self, f32));
    RETURN_IF_ERROR(CheckTensor(p + "cross_k", io.cross_k[i], cross, f32, true));
    RETURN_IF_ERROR(CheckTensor(p + "cross_v", io.cross_v[i], cross, io.cross_k[i].dtype()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Upload(Backend& backend, const Shape& shape, DType dtype, const void* src) {
  ASSIGN_OR_RETURN(Tensor t, backend.Allocate(shape, dtype));
  RETURN_IF_ERROR(backend.CopyFromHost(src, t.size_bytes(), t));
  return t;
}

absl::StatusOr<std::vector<float>> DownloadFloats(Backend& backend, const Tensor& t) {
  if (t.dtype() == DType::kF32) return Download<float>(backend, t);
  if (t.dtype() != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("DownloadFloats: ", t.Describe(), " is neither f32 nor f16"));
  }
  absl::StatusOr<std::vector<uint16_t>> halves = Download<uint16_t>(backend, t);
  if (!halves.ok()) return halves.status();
  std::vector<float> out(halves->size());
  HalfToFloatArray(halves->data(), out.data(), out.size());
  return out;
}

}  // namespace waav
