// Whisper's cross-attention with its key and value projections absorbed into the query and
// output projections (WhisperModelOptions::absorbed_cross_attention).
//
// Per head h (width hd = d / H, rows h·hd .. h·hd + hd of the projections), with E the encoder
// output and c_h = Σ_j p_j E_j:
//   score_j = scale · q_h · (Wk_h E_j + bk_h) = scale · (Wk_hᵀ q_h) · E_j + (a constant in j)
//   out     = Σ_h Wo_h (Wv_h c_h + bv_h) + bo = Σ_h (Wo_h Wv_h) c_h + (bo + Wo bv)
// since the probabilities sum to one. So the query projection becomes q'_h = Wk_hᵀ (Wq_h x + bq_h)
// (one [H·d, d] GEMM), the attention is Backend::SharedKvAttention over E, and the output
// projection one [d, H·d] GEMM. The key bias cancels in the softmax.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/backend_inl.h"
#include "engine/runtime/status.h"

namespace waav::whisper {
namespace {

absl::StatusOr<std::vector<double>> HostValues(Backend& backend, const Tensor& t) {
  if (t.dtype() == DType::kF32) {
    ASSIGN_OR_RETURN(const std::vector<float> v, Download<float>(backend, t));
    return std::vector<double>(v.begin(), v.end());
  }
  if (t.dtype() == DType::kF16) {
    ASSIGN_OR_RETURN(const std::vector<uint16_t> v, Download<uint16_t>(backend, t));
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = HalfToFloat(v[i]);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("absorbed cross-attention: weight ", t.Describe(), " is neither f32 nor f16"));
}

// `values` as a new tensor of `dtype` (f32, or f16 rounded to nearest).
absl::StatusOr<Tensor> UploadAs(Backend& backend, const Shape& shape, DType dtype,
                                const std::vector<double>& values) {
  if (dtype == DType::kF16) {
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = FloatToHalf(static_cast<float>(values[i]));
    return Upload(backend, shape, dtype, half.data());
  }
  const std::vector<float> single(values.begin(), values.end());
  return Upload(backend, shape, DType::kF32, single.data());
}

}  // namespace

absl::Status WhisperModel::PrepareAbsorbedCross(bool required) {
  const int64_t d = dims_.d_model, heads = dims_.n_heads, hd = d / heads, wide = heads * d;
  std::string refusal;
  if (!backend_.supports(Op::kSharedKvAttention)) {
    refusal = absl::StrCat("backend '", std::string(backend_.name()), "' has no SharedKvAttention");
  } else if (d % 64 != 0 || d > backend_.shared_kv_max_width()) {
    refusal = absl::StrCat("d_model ", d, " is not a multiple of 64 up to ",
                           backend_.shared_kv_max_width(), " (the backend's widest here)");
  }
  if (!refusal.empty()) {
    if (!required) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat("absorbed cross-attention: ", refusal));
  }
  for (DecoderLayer& layer : decoder_layers_) {
    const AttentionWeights& w = layer.cross_attention;
    ASSIGN_OR_RETURN(const std::vector<double> wq, HostValues(backend_, w.q_w));
    ASSIGN_OR_RETURN(const std::vector<double> bq, HostValues(backend_, w.q_b));
    ASSIGN_OR_RETURN(const std::vector<double> wk, HostValues(backend_, w.k_w));
    ASSIGN_OR_RETURN(const std::vector<double> wv, HostValues(backend_, w.v_w));
    ASSIGN_OR_RETURN(const std::vector<double> bv, HostValues(backend_, w.v_b));
    ASSIGN_OR_RETURN(const std::vector<double> wo, HostValues(backend_, w.out_w));
    ASSIGN_OR_RETURN(const std::vector<double> bo, HostValues(backend_, w.out_b));
    // Weights are [out, in]: Wq[h·hd + e][m], Wk[h·hd + e][i], Wv[h·hd + e][i], Wo[n][h·hd + e].
    std::vector<double> q_w(static_cast<size_t>(wide * d)), q_b(static_cast<size_t>(wide));
    std::vector<double> out_w(static_cast<size_t>(d * wide)), out_b(bo);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t e = 0; e < hd; ++e) {
        const double* k_row = &wk[static_cast<size_t>((h * hd + e) * d)];
        const double* q_row = &wq[static_cast<size_t>((h * hd + e) * d)];
        const double q_bias = bq[static_cast<size_t>(h * hd + e)];
        for (int64_t i = 0; i < d; ++i) {
          double* dst = &q_w[static_cast<size_t>((h * d + i) * d)];
          for (int64_t m = 0; m < d; ++m) dst[m] += k_row[i] * q_row[m];
          q_b[static_cast<size_t>(h * d + i)] += q_bias * k_row[i];
        }
      }
    }
    for (int64_t n = 0; n < d; ++n) {
      for (int64_t k = 0; k < d; ++k) {
        const double o = wo[static_cast<size_t>(n * d + k)];
        out_b[static_cast<size_t>(n)] += o * bv[static_cast<size_t>(k)];
        const int64_t h = k / hd;
        const double* v_row = &wv[static_cast<size_t>(k * d)];
        double* dst = &out_w[static_cast<size_t>(n * wide + h * d)];
        for (int64_t i = 0; i < d; ++i) dst[i] += o * v_row[i];
      }
    }
    AbsorbedCrossWeights& a = layer.absorbed_cross;
    ASSIGN_OR_RETURN(a.q_w, UploadAs(backend_, {wide, d}, w.q_w.dtype(), q_w));
    ASSIGN_OR_RETURN(a.q_b, UploadAs(backend_, {wide}, DType::kF32, q_b));
    ASSIGN_OR_RETURN(a.out_w, UploadAs(backend_, {d, wide}, w.out_w.dtype(), out_w));
    ASSIGN_OR_RETURN(a.out_b, UploadAs(backend_, {d}, DType::kF32, out_b));
  }
  absorbed_cross_ = true;
  return backend_.Synchronize();
}

absl::Status WhisperModel::RunAbsorbedCross(int layer, const Tensor& x, DecoderState& state,
                                            const Workspace& ws, bool fuse_residual) const {
  const DecoderLayer& l = decoder_layers_[static_cast<size_t>(layer)];
  const AbsorbedCrossWeights& a = l.absorbed_cross;
  const DecoderState::StepBuffers& s = state.step_;
  // The normed row in f16 where the state has the FFN's f16 input buffer (f16 weights, f16
  // activations: as in the FFN, the wide GEMM then reads it without a conversion kernel, and
  // would round it to f16 anyway).
  const Tensor& normed = s.ffn_h.defined() ? s.ffn_h : ws.h;
  RETURN_IF_ERROR(backend_.LayerNorm(x, l.cross_attention.norm_gamma, l.cross_attention.norm_beta,
                                     1e-5f, normed));
  RETURN_IF_ERROR(backend_.Linear(normed, a.q_w, &a.q_b, Activation::kNone, s.absorbed_q));
  const Tensor* scales =
      state.cross_source_scales_.defined() ? &state.cross_source_scales_ : nullptr;
  RETURN_IF_ERROR(backend_.SharedKvAttention(s.absorbed_q, state.cross_source_, scales,
                                             dims_.n_heads, attention_scale_, s.absorbed_out));
  if (fuse_residual) {
    return backend_.LinearResidual(s.absorbed_out, a.out_w, &a.out_b, Activation::kNone, x, x);
  }
  RETURN_IF_ERROR(backend_.Linear(s.absorbed_out, a.out_w, &a.out_b, Activation::kNone, s.out));
  return backend_.Add(x, s.out, x);
}

}  // namespace waav::whisper
