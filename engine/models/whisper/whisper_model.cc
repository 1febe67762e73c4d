#include "engine/models/whisper/whisper_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/models/ct2/model_file.h"
#include "engine/runtime/status.h"

namespace waav::whisper {
namespace {

// Copies rows [row_begin, row_end) of a CTranslate2 variable (f16 or f32) to a new backend
// tensor of `shape` and `dtype`. Fused projections (QKV, KV) are split this way at load time.
absl::StatusOr<Tensor> UploadRows(Backend& backend, const ct2::Variable& var, int64_t row_begin,
                                  int64_t row_end, const Shape& shape, DType dtype) {
  if (var.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("variable ", var.name, " is a scalar"));
  }
  int64_t numel = 1;
  for (int64_t d : var.shape) numel *= d;
  const int64_t row_elements = numel / var.shape[0];
  const int64_t count = (row_end - row_begin) * row_elements;
  if (row_begin < 0 || row_end > var.shape[0] || count != shape.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable ", var.name, " cannot provide ", shape.ToString()));
  }
  const bool is_f16 = var.type == ct2::VarType::kF16;
  if (!is_f16 && var.type != ct2::VarType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", var.name, " has an element type waav cannot load (want f16 or f32)"));
  }
  const size_t src_size = is_f16 ? 2 : 4;
  const uint8_t* src = var.data() + static_cast<size_t>(row_begin * row_elements) * src_size;
  if (dtype != DType::kF16 && dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("variable ", var.name, " cannot be loaded as ",
                                                   std::string(DTypeName(dtype))));
  }
  // Same type: the file's bytes as they are (little-endian, as the backends). Otherwise convert.
  if (is_f16 == (dtype == DType::kF16) && (is_f16 || dtype == DType::kF32)) {
    return Upload(backend, shape, dtype, src);
  }
  std::vector<uint8_t> host(static_cast<size_t>(count) * SizeOf(dtype));
  if (is_f16 && dtype == DType::kF32) {
    HalfToFloatArray(src, reinterpret_cast<float*>(host.data()), static_cast<size_t>(count));
  } else {
    for (int64_t i = 0; i < count; ++i) {
      float value;
      std::memcpy(&value, src + i * 4, 4);
      const uint16_t half = FloatToHalf(value);
      std::memcpy(host.data() + i * 2, &half, 2);
    }
  }
  return Upload(backend, shape, dtype, host.data());
}

class WeightLoader {
 public:
  WeightLoader(const ct2::ModelFile& file, Backend& backend) : file_(file), backend_(backend) {}

  // The whole variable, checked against `shape`.
  absl::StatusOr<Tensor> Load(const std::string& name, const Shape& shape, DType dtype) {
    ASSIGN_OR_RETURN(const ct2::Variable* var, file_.GetTensor(name, shape.dims()));
    return UploadRows(backend_, *var, 0, var->shape[0], shape, dtype);
  }

  // Rows [begin, end) of a fused variable whose full shape is `full_shape`.
  absl::StatusOr<Tensor> LoadRows(const std::string& name, const Shape& full_shape, int64_t begin,
                                  int64_t end, DType dtype) {
    ASSIGN_OR_RETURN(const ct2::Variable* var, file_.GetTensor(name, full_shape.dims()));
    std::vector<int64_t> dims = full_shape.dims();
    dims[0] = end - begin;
    return UploadRows(backend_, *var, begin, end, Shape(std::move(dims)), dtype);
  }

  bool Has(const std::string& name) const { return file_.Get(name).ok(); }

 private:
  const ct2::ModelFile& file_;
  Backend& backend_;
};

absl::StatusOr<int64_t> DimOf(const ct2::ModelFile& file, const std::string& name, int axis) {
  ASSIGN_OR_RETURN(const ct2::Variable* var, file.Get(name));
  if (axis >= static_cast<int>(var->shape.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": variable ", name, " has rank ", var->shape.size()));
  }
  return var->shape[static_cast<size_t>(axis)];
}

// Flags of the CTranslate2 spec that this implementation assumes (Whisper as released).
absl::Status CheckFlag(const ct2::ModelFile& file, const std::string& name, int64_t want) {
  auto value = file.GetScalarInt(name);
  if (!value.ok()) return absl::OkStatus();  // older specs omit some flags; defaults match
  if (*value != want) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": ", name, " = ", *value,
                                                 " is not supported (waav implements ", want, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<WhisperModel>> WhisperModel::Load(const std::string& model_dir,
                                                                 Backend& backend,
                                                                 WhisperModelOptions options) {
  ASSIGN_OR_RETURN(ct2::ModelFile file, ct2::ModelFile::Open(model_dir + "/model.bin"));
  return FromModelFile(file, backend, options);
}

absl::StatusOr<std::unique_ptr<WhisperModel>> WhisperModel::FromModelFile(
    const ct2::ModelFile& file, Backend& backend, WhisperModelOptions options) {
  if (file.spec_name() != "WhisperSpec") {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), " holds a ", file.spec_name(), " model, not a Whisper model"));
  }
  RETURN_IF_ERROR(CheckFlag(file, "decoder/activation", 3));  // GELU (erf)
  RETURN_IF_ERROR(CheckFlag(file, "decoder/pre_norm", 1));
  RETURN_IF_ERROR(CheckFlag(file, "decoder/alibi", 0));
  RETURN_IF_ERROR(CheckFlag(file, "decoder/scale_embeddings", 0));

  WhisperDims dims;
  ASSIGN_OR_RETURN(int64_t d_model, DimOf(file, "encoder/conv1/weight", 0));
  ASSIGN_OR_RETURN(int64_t n_mels, DimOf(file, "encoder/conv1/weight", 1));
  ASSIGN_OR_RETURN(int64_t n_audio_ctx, DimOf(file, "encoder/position_encodings/encodings", 0));
  ASSIGN_OR_RETURN(int64_t n_text_ctx, DimOf(file, "decoder/position_encodings/encodings", 0));
  ASSIGN_OR_RETURN(int64_t n_vocab, DimOf(file, "decoder/embeddings/weight", 0));
  ASSIGN_OR_RETURN(int64_t n_heads, file.GetScalarInt("encoder/num_heads"));
  ASSIGN_OR_RETURN(int64_t n_dec_heads, file.GetScalarInt("decoder/num_heads"));
  if (n_heads <= 0 || d_model % n_heads != 0 || n_dec_heads != n_heads) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", n_heads, " encoder and ",
                                                   n_dec_heads, " decoder heads do not divide ",
                                                   d_model));
  }
  dims.d_model = static_cast<int>(d_model);
  dims.n_mels = static_cast<int>(n_mels);
  if (options.audio_ctx < 0 || options.audio_ctx > n_audio_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("audio_ctx ", options.audio_ctx, " is outside [0, ", n_audio_ctx, "]"));
  }
  dims.n_audio_ctx = options.audio_ctx > 0 ? options.audio_ctx : static_cast<int>(n_audio_ctx);
  dims.n_text_ctx = static_cast<int>(n_text_ctx);
  dims.n_vocab = static_cast<int>(n_vocab);
  dims.n_heads = static_cast<int>(n_heads);
  dims.n_encoder_layers = 0;
  while (
      file.Get(absl::StrCat("encoder/layer_", dims.n_encoder_layers, "/ffn/linear_0/weight")).ok())
    ++dims.n_encoder_layers;
  dims.n_decoder_layers = 0;
  while (
      file.Get(absl::StrCat("decoder/layer_", dims.n_decoder_layers, "/ffn/linear_0/weight")).ok())
    ++dims.n_decoder_layers;
  if (dims.n_encoder_layers == 0 || dims.n_decoder_layers == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), " has no encoder or decoder layers"));
  }

  auto model = std::unique_ptr<WhisperModel>(new WhisperModel(backend, dims));
  switch (options.graphs) {
    case GraphUse::kAuto:
      model->use_graphs_ = backend.device() != DeviceKind::kCpu;
      break;
    case GraphUse::kAlways:
      model->use_graphs_ = true;
      break;
    case GraphUse::kNever:
      model->use_graphs_ = false;
      break;
  }
  model->step_choice_ = options.step_choice;
  switch (options.batch_encoder) {
    case GraphUse::kAuto:
      model->batch_encoder_ = backend.device() != DeviceKind::kCpu;
      break;
    case GraphUse::kAlways:
      model->batch_encoder_ = true;
      break;
    case GraphUse::kNever:
      model->batch_encoder_ = false;
      break;
  }
  model->attention_scale_ = 1.0f / std::sqrt(static_cast<float>(d_model / n_heads));
  WeightLoader loader(file, backend);
  const int64_t d = d_model;
  const DType wt = options.weight_dtype.value_or(
      backend.device() == DeviceKind::kCpu ? DType::kF32 : DType::kF16);
  const DType f32 = DType::kF32;

  auto load_norm = [&](const std::string& prefix, Tensor& gamma, Tensor& beta) -> absl::Status {
    ASSIGN_OR_RETURN(gamma, loader.Load(prefix + "/gamma", {d}, f32));
    ASSIGN_OR_RETURN(beta, loader.Load(prefix + "/beta", {d}, f32));
    return absl::OkStatus();
  };
  // Self-attention: linear_0 is the fused [Q; K; V] projection, linear_1 the output.
  auto load_self_attention = [&](const std::string& p, AttentionWeights& w) -> absl::Status {
    RETURN_IF_ERROR(load_norm(p + "/layer_norm", w.norm_gamma, w.norm_beta));
    const Shape fused_w{3 * d, d}, fused_b{3 * d};
    if (backend.supports(Op::kLinearPlanes)) {
      // The stacked [Q; K; V] projection for one GEMM; the separate weights become its views.
      ASSIGN_OR_RETURN(w.qkv_w, loader.Load(p + "/linear_0/weight", fused_w, wt));
      ASSIGN_OR_RETURN(w.qkv_b, loader.Load(p + "/linear_0/bias", fused_b, f32));
      ASSIGN_OR_RETURN(w.q_w, w.qkv_w.Slice(0, d));
      ASSIGN_OR_RETURN(w.k_w, w.qkv_w.Slice(d, 2 * d));
      ASSIGN_OR_RETURN(w.v_w, w.qkv_w.Slice(2 * d, 3 * d));
      ASSIGN_OR_RETURN(w.q_b, w.qkv_b.Slice(0, d));
      ASSIGN_OR_RETURN(w.k_b, w.qkv_b.Slice(d, 2 * d));
      ASSIGN_OR_RETURN(w.v_b, w.qkv_b.Slice(2 * d, 3 * d));
      ASSIGN_OR_RETURN(w.out_w, loader.Load(p + "/linear_1/weight", {d, d}, wt));
      ASSIGN_OR_RETURN(w.out_b, loader.Load(p + "/linear_1/bias", {d}, f32));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(w.q_w, loader.LoadRows(p + "/linear_0/weight", fused_w, 0, d, wt));
    ASSIGN_OR_RETURN(w.k_w, loader.LoadRows(p + "/linear_0/weight", fused_w, d, 2 * d, wt));
    ASSIGN_OR_RETURN(w.v_w, loader.LoadRows(p + "/linear_0/weight", fused_w, 2 * d, 3 * d, wt));
    ASSIGN_OR_RETURN(w.q_b, loader.LoadRows(p + "/linear_0/bias", fused_b, 0, d, f32));
    ASSIGN_OR_RETURN(w.k_b, loader.LoadRows(p + "/linear_0/bias", fused_b, d, 2 * d, f32));
    ASSIGN_OR_RETURN(w.v_b, loader.LoadRows(p + "/linear_0/bias", fused_b, 2 * d, 3 * d, f32));
    ASSIGN_OR_RETURN(w.out_w, loader.Load(p + "/linear_1/weight", {d, d}, wt));
    ASSIGN_OR_RETURN(w.out_b, loader.Load(p + "/linear_1/bias", {d}, f32));
    return absl::OkStatus();
  };
  // Cross-attention: linear_0 is Q, linear_1 the fused [K; V] over encoder output, linear_2 out.
  auto load_cross_attention = [&](const std::string& p, AttentionWeights& w) -> absl::Status {
    RETURN_IF_ERROR(load_norm(p + "/layer_norm", w.norm_gamma, w.norm_beta));
    const Shape fused_w{2 * d, d}, fused_b{2 * d};
    ASSIGN_OR_RETURN(w.q_w, loader.Load(p + "/linear_0/weight", {d, d}, wt));
    ASSIGN_OR_RETURN(w.q_b, loader.Load(p + "/linear_0/bias", {d}, f32));
    ASSIGN_OR_RETURN(w.k_w, loader.LoadRows(p + "/linear_1/weight", fused_w, 0, d, wt));
    ASSIGN_OR_RETURN(w.v_w, loader.LoadRows(p + "/linear_1/weight", fused_w, d, 2 * d, wt));
    ASSIGN_OR_RETURN(w.k_b, loader.LoadRows(p + "/linear_1/bias", fused_b, 0, d, f32));
    ASSIGN_OR_RETURN(w.v_b, loader.LoadRows(p + "/linear_1/bias", fused_b, d, 2 * d, f32));
    ASSIGN_OR_RETURN(w.out_w, loader.Load(p + "/linear_2/weight", {d, d}, wt));
    ASSIGN_OR_RETURN(w.out_b, loader.Load(p + "/linear_2/bias", {d}, f32));
    return absl::OkStatus();
  };
  auto load_ffn = [&](const std::string& p, FeedForwardWeights& w) -> absl::Status {
    RETURN_IF_ERROR(load_norm(p + "/layer_norm", w.norm_gamma, w.norm_beta));
    ASSIGN_OR_RETURN(const int64_t hidden, DimOf(file, p + "/linear_0/weight", 0));
    ASSIGN_OR_RETURN(w.in_w, loader.Load(p + "/linear_0/weight", {hidden, d}, wt));
    ASSIGN_OR_RETURN(w.in_b, loader.Load(p + "/linear_0/bias", {hidden}, f32));
    ASSIGN_OR_RETURN(w.out_w, loader.Load(p + "/linear_1/weight", {d, hidden}, wt));
    ASSIGN_OR_RETURN(w.out_b, loader.Load(p + "/linear_1/bias", {d}, f32));
    return absl::OkStatus();
  };

  WhisperModel& m = *model;
  ASSIGN_OR_RETURN(m.conv1_w_, loader.Load("encoder/conv1/weight", {d, n_mels, 3}, wt));
  ASSIGN_OR_RETURN(m.conv1_b_, loader.Load("encoder/conv1/bias", {d}, f32));
  ASSIGN_OR_RETURN(m.conv2_w_, loader.Load("encoder/conv2/weight", {d, d, 3}, wt));
  ASSIGN_OR_RETURN(m.conv2_b_, loader.Load("encoder/conv2/bias", {d}, f32));
  ASSIGN_OR_RETURN(m.encoder_positions_,
                   loader.LoadRows("encoder/position_encodings/encodings", {n_audio_ctx, d}, 0,
                                   dims.n_audio_ctx, f32));
  RETURN_IF_ERROR(load_norm("encoder/layer_norm", m.encoder_norm_gamma_, m.encoder_norm_beta_));
  m.encoder_layers_.resize(static_cast<size_t>(dims.n_encoder_layers));
  for (int i = 0; i < dims.n_encoder_layers; ++i) {
    const std::string p = absl::StrCat("encoder/layer_", i);
    EncoderLayer& layer = m.encoder_layers_[i];
    RETURN_IF_ERROR(load_self_attention(p + "/self_attention", layer.self_attention));
    RETURN_IF_ERROR(load_ffn(p + "/ffn", layer.ffn));
  }
  ASSIGN_OR_RETURN(m.token_embedding_,
                   loader.Load("decoder/embeddings/weight", {n_vocab, d}, options.embedding_dtype));
  ASSIGN_OR_RETURN(m.decoder_positions_,
                   loader.Load("decoder/position_encodings/encodings", {n_text_ctx, d}, f32));
  RETURN_IF_ERROR(load_norm("decoder/layer_norm", m.decoder_norm_gamma_, m.decoder_norm_beta_));
  m.decoder_layers_.resize(static_cast<size_t>(dims.n_decoder_layers));
  for (int i = 0; i < dims.n_decoder_layers; ++i) {
    const std::string p = absl::StrCat("decoder/layer_", i);
    DecoderLayer& layer = m.decoder_layers_[i];
    RETURN_IF_ERROR(load_self_attention(p + "/self_attention", layer.self_attention));
    RETURN_IF_ERROR(load_cross_attention(p + "/attention", layer.cross_attention));
    RETURN_IF_ERROR(load_ffn(p + "/ffn", layer.ffn));
  }
  if (options.half_cross_cache && backend.supports(Op::kHalfActivations)) {
    m.cross_dtype_ = DType::kF16;
  }
  if (options.stacked_cross_projection && backend.supports(Op::kLinearPlanes)) {
    RETURN_IF_ERROR(m.StackCrossProjections());
  }
  m.half_encoder_attention_ = options.half_encoder_attention_output;
  // The absorbed cross-attention pays where the encoder output is kept in f16 (kAuto); kAlways
  // takes it wherever the backend has the op.
  const GraphUse absorbed = options.absorbed_cross_attention;
  if (absorbed == GraphUse::kAlways ||
      (absorbed == GraphUse::kAuto && m.cross_dtype_ == DType::kF16)) {
    RETURN_IF_ERROR(m.PrepareAbsorbedCross(absorbed == GraphUse::kAlways));
  }
  m.cross_source_dtype_ = m.cross_dtype_;
  if (m.absorbed_cross_) {
    // i8 pays where it halves an f16 read (kAuto); kAlways takes it wherever the op is.
    const GraphUse quantized = options.quantized_cross_source;
    const bool has_op = backend.supports(Op::kQuantizeChannels);
    if (quantized == GraphUse::kAlways && !has_op) {
      return absl::UnimplementedError(absl::StrCat("quantized cross source: backend '",
                                                   std::string(backend.name()),
                                                   "' has no QuantizeChannels"));
    }
    if (has_op && (quantized == GraphUse::kAlways ||
                   (quantized == GraphUse::kAuto && m.cross_dtype_ == DType::kF16))) {
      m.cross_source_dtype_ = DType::kI8;
    }
  }
  RETURN_IF_ERROR(backend.Synchronize());
  if (options.fused_decoder_step != GraphUse::kNever) {
    RETURN_IF_ERROR(m.PrepareFusedStep(options.fused_decoder_step == GraphUse::kAlways));
  }
  m.short_windows_ =
      options.short_windows == GraphUse::kAlways ||
      (options.short_windows == GraphUse::kAuto && backend.device() == DeviceKind::kCpu);
  return model;
}

absl::Status WhisperModel::PrepareFusedStep(bool required) {
  if (!backend_.supports(Op::kDecoderStep)) {
    if (!required) return absl::OkStatus();
    return absl::UnimplementedError(
        absl::StrCat("backend '", std::string(backend_.name()), "' has no prepared decoder step"));
  }
  DecoderStepWeights w;
  w.dims = {.d_model = dims_.d_model,
            .n_heads = dims_.n_heads,
            .ffn_dim = static_cast<int>(decoder_layers_[0].ffn.in_w.dim(0)),
            .n_layers = dims_.n_decoder_layers,
            .n_vocab = dims_.n_vocab,
            .n_positions = dims_.n_text_ctx,
            .n_source = dims_.n_audio_ctx,
            .attention_scale = attention_scale_,
            .norm_eps = 1e-5f};
  w.token_embedding = token_embedding_;
  w.position_table = decoder_positions_;
  w.final_norm_gamma = decoder_norm_gamma_;
  w.final_norm_beta = decoder_norm_beta_;
  for (const DecoderLayer& layer : decoder_layers_) {
    const AttentionWeights &sa = layer.self_attention, &ca = layer.cross_attention;
    const FeedForwardWeights& ff = layer.ffn;
    w.layers.push_back({.self_norm_gamma = sa.norm_gamma,
                        .self_norm_beta = sa.norm_beta,
                        .q_w = sa.q_w,
                        .q_b = sa.q_b,
                        .k_w = sa.k_w,
                        .k_b = sa.k_b,
                        .v_w = sa.v_w,
                        .v_b = sa.v_b,
                        .out_w = sa.out_w,
                        .out_b = sa.out_b,
                        .cross_norm_gamma = ca.norm_gamma,
                        .cross_norm_beta = ca.norm_beta,
                        .cross_q_w = ca.q_w,
                        .cross_q_b = ca.q_b,
                        .cross_out_w = ca.out_w,
                        .cross_out_b = ca.out_b,
                        .ffn_norm_gamma = ff.norm_gamma,
                        .ffn_norm_beta = ff.norm_beta,
                        .ff1_w = ff.in_w,
                        .ff1_b = ff.in_b,
                        .ff2_w = ff.out_w,
                        .ff2_b = ff.out_b});
  }
  absl::StatusOr<std::unique_ptr<PreparedDecoderStep>> step = backend_.PrepareDecoderStep(w);
  if (step.ok()) {
    prepared_step_ = std::move(*step);
    return absl::OkStatus();
  }
  // Dims the backend has no kernel for: op by op, unless the caller asked for the fused step.
  if (!required && absl::IsUnimplemented(step.status())) return absl::OkStatus();
  return step.status();
}

absl::StatusOr<std::unique_ptr<DecoderState>> WhisperModel::NewDecoderState(int batch_size) const {
  if (batch_size <= 0) return absl::InvalidArgumentError("batch size must be positive");
  auto state = std::make_unique<DecoderState>();
  state->batch_size_ = batch_size;
  const int64_t b = batch_size, d = dims_.d_model;
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    ASSIGN_OR_RETURN(Tensor ck, backend_.Allocate({b, dims_.n_audio_ctx, d}, cross_dtype_));
    ASSIGN_OR_RETURN(Tensor cv, backend_.Allocate({b, dims_.n_audio_ctx, d}, cross_dtype_));
    ASSIGN_OR_RETURN(Tensor sk, backend_.Allocate({b, dims_.n_text_ctx, d}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor sv, backend_.Allocate({b, dims_.n_text_ctx, d}, DType::kF32));
    state->cross_k_.push_back(ck);
    state->cross_v_.push_back(cv);
    state->self_k_.push_back(sk);
    state->self_v_.push_back(sv);
  }
  if (absorbed_cross_) {
    ASSIGN_OR_RETURN(state->cross_source_,
                     backend_.Allocate({b, dims_.n_audio_ctx, d}, cross_source_dtype_));
    if (cross_source_dtype_ == DType::kI8) {
      ASSIGN_OR_RETURN(state->cross_source_scales_, backend_.Allocate({b, d}, DType::kF32));
    }
  }
  if (short_windows_) {
    ASSIGN_OR_RETURN(
        state->cross_lengths_,
        Upload(backend_, {b}, DType::kI32,
               std::vector<int32_t>(static_cast<size_t>(b), dims_.n_audio_ctx).data()));
    state->window_positions_ =
        std::make_shared<std::vector<int>>(static_cast<size_t>(b), dims_.n_audio_ctx);
    state->full_positions_ = dims_.n_audio_ctx;
  }
  ASSIGN_OR_RETURN(state->positions_, backend_.Allocate({b}, DType::kI32));
  ASSIGN_OR_RETURN(state->lengths_, backend_.Allocate({b}, DType::kI32));
  DecoderState::StepBuffers& step = state->step_;
  ASSIGN_OR_RETURN(step.tokens, backend_.Allocate({b, 1}, DType::kI32));
  ASSIGN_OR_RETURN(step.x, backend_.Allocate({b, 1, d}, DType::kF32));
  ASSIGN_OR_RETURN(step.out, backend_.Allocate({b, 1, d}, DType::kF32));
  ASSIGN_OR_RETURN(Workspace ws, NewWorkspace(step.x.shape()));
  step.h = ws.h;
  step.q = ws.q;
  step.k = ws.k;
  step.v = ws.v;
  step.attended = ws.attended;
  step.hidden = ws.hidden;
  // (f16 weights only: their GEMMs round x to f16 anyway above a few rows, so the f16 buffers
  // change no result there; f32 weights keep f32 activations.)
  if (backend_.supports(Op::kHalfActivations) && backend_.supports(Op::kLinearResidual) &&
      !decoder_layers_.empty() && decoder_layers_.front().ffn.in_w.dtype() == DType::kF16) {
    ASSIGN_OR_RETURN(step.ffn_h, backend_.Allocate({b, 1, d}, DType::kF16));
    // The attention's output too: the output projection's GEMM reads it as it is (above 8 rows
    // a cuBLAS GEMM, which rounded it to f16 anyway; the skinny kernel of up to 8 rows widens
    // it, which only the op-by-op step of so few rows meets: the fused step takes them).
    ASSIGN_OR_RETURN(step.attended, backend_.Allocate({b, 1, d}, DType::kF16));
    ASSIGN_OR_RETURN(step.ffn_hidden,
                     backend_.Allocate({b * decoder_layers_.front().ffn.in_w.dim(0)}, DType::kF16));
  }
  ASSIGN_OR_RETURN(step.logits, backend_.Allocate({b, dims_.n_vocab}, DType::kF32));
  if (absorbed_cross_) {
    // The attention's output in f16 beside the f16 FFN buffers: the wide output projection reads
    // it as it is (its GEMM rounded it to f16 anyway), no conversion kernel.
    ASSIGN_OR_RETURN(step.absorbed_q, backend_.Allocate({b, 1, dims_.n_heads * d}, DType::kF32));
    ASSIGN_OR_RETURN(step.absorbed_out,
                     backend_.Allocate(
                         {b, 1, dims_.n_heads * d},
                         step.ffn_h.defined() &&
                                 decoder_layers_.front().absorbed_cross.out_w.dtype() == DType::kF16
                             ? DType::kF16
                             : DType::kF32));
  }
  return state;
}

bool DecoderState::holds_short_window() const {
  if (window_positions_ == nullptr) return false;
  const auto first = window_positions_->begin() + first_row_;
  return std::any_of(first, first + batch_size_,
                     [&](int positions) { return positions < full_positions_; });
}

absl::StatusOr<std::unique_ptr<DecoderState>> DecoderState::Rows(int begin, int end) const {
  if (begin < 0 || end > batch_size_ || begin >= end) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", begin, ", ", end, ") of a decoder state of batch ", batch_size_));
  }
  // Every tensor of the state has the batch in dimension 0, except `hidden`, which is flat
  // (rows × the widest feed-forward layer) and is sliced by its per-row share.
  auto rows = [&](const Tensor& t) { return t.Slice(begin, end); };
  auto view = std::make_unique<DecoderState>();
  view->batch_size_ = end - begin;
  for (size_t i = 0; i < self_k_.size(); ++i) {
    ASSIGN_OR_RETURN(Tensor ck, rows(cross_k_[i]));
    ASSIGN_OR_RETURN(Tensor cv, rows(cross_v_[i]));
    ASSIGN_OR_RETURN(Tensor sk, rows(self_k_[i]));
    ASSIGN_OR_RETURN(Tensor sv, rows(self_v_[i]));
    view->cross_k_.push_back(ck);
    view->cross_v_.push_back(cv);
    view->self_k_.push_back(sk);
    view->self_v_.push_back(sv);
  }
  if (cross_source_.defined()) {
    ASSIGN_OR_RETURN(view->cross_source_, rows(cross_source_));
  }
  if (cross_source_scales_.defined()) {
    ASSIGN_OR_RETURN(view->cross_source_scales_, rows(cross_source_scales_));
  }
  if (cross_lengths_.defined()) {
    ASSIGN_OR_RETURN(view->cross_lengths_, rows(cross_lengths_));
  }
  view->window_positions_ = window_positions_;
  view->first_row_ = first_row_ + begin;
  view->full_positions_ = full_positions_;
  ASSIGN_OR_RETURN(view->positions_, rows(positions_));
  ASSIGN_OR_RETURN(view->lengths_, rows(lengths_));
  const StepBuffers& s = step_;
  StepBuffers& v = view->step_;
  ASSIGN_OR_RETURN(v.tokens, rows(s.tokens));
  ASSIGN_OR_RETURN(v.x, rows(s.x));
  ASSIGN_OR_RETURN(v.out, rows(s.out));
  ASSIGN_OR_RETURN(v.h, rows(s.h));
  ASSIGN_OR_RETURN(v.q, rows(s.q));
  ASSIGN_OR_RETURN(v.k, rows(s.k));
  ASSIGN_OR_RETURN(v.v, rows(s.v));
  ASSIGN_OR_RETURN(v.attended, rows(s.attended));
  ASSIGN_OR_RETURN(v.logits, rows(s.logits));
  const int64_t hidden_per_row = s.hidden.numel() / batch_size_;
  ASSIGN_OR_RETURN(v.hidden, s.hidden.Slice(begin * hidden_per_row, end * hidden_per_row));
  if (s.ffn_h.defined()) {
    ASSIGN_OR_RETURN(v.ffn_h, rows(s.ffn_h));
    const int64_t ffn_per_row = s.ffn_hidden.numel() / batch_size_;
    ASSIGN_OR_RETURN(v.ffn_hidden, s.ffn_hidden.Slice(begin * ffn_per_row, end * ffn_per_row));
  }
  if (s.absorbed_q.defined()) {
    ASSIGN_OR_RETURN(v.absorbed_q, rows(s.absorbed_q));
    ASSIGN_OR_RETURN(v.absorbed_out, rows(s.absorbed_out));
  }
  return view;
}

absl::StatusOr<WhisperModel::Workspace> WhisperModel::NewWorkspace(const Shape& x_shape) const {
  const int64_t rows = x_shape.numel() / dims_.d_model;
  const int64_t n_ff =
      decoder_layers_.empty() ? 4 * int64_t{dims_.d_model} : decoder_layers_[0].ffn.in_w.dim(0);
  int64_t encoder_ff = n_ff;
  if (!encoder_layers_.empty()) encoder_ff = encoder_layers_[0].ffn.in_w.dim(0);
  Workspace ws;
  ASSIGN_OR_RETURN(ws.h, backend_.Allocate(x_shape, DType::kF32));
  ASSIGN_OR_RETURN(ws.q, backend_.Allocate(x_shape, DType::kF32));
  ASSIGN_OR_RETURN(ws.k, backend_.Allocate(x_shape, DType::kF32));
  ASSIGN_OR_RETURN(ws.v, backend_.Allocate(x_shape, DType::kF32));
  ASSIGN_OR_RETURN(ws.attended, backend_.Allocate(x_shape, DType::kF32));
  // Flat, so that a block with a narrower hidden layer can take a prefix.
  ASSIGN_OR_RETURN(ws.hidden, backend_.Allocate({rows * std::max(n_ff, encoder_ff)}, DType::kF32));
  return ws;
}

absl::Status WhisperModel::RunFeedForward(const FeedForwardWeights& w, const Tensor& x,
                                          const Workspace& ws, bool fuse_residual) const {
  const int64_t rows = x.numel() / dims_.d_model;
  const Tensor& h = ws.h;
  ASSIGN_OR_RETURN(Tensor hidden, ws.hidden.Slice(0, rows * w.in_w.dim(0)));
  ASSIGN_OR_RETURN(hidden, hidden.Reshape({rows, w.in_w.dim(0)}));
  ASSIGN_OR_RETURN(Tensor h2, h.Reshape({rows, dims_.d_model}));
  RETURN_IF_ERROR(backend_.LayerNorm(x, w.norm_gamma, w.norm_beta, 1e-5f, h));
  RETURN_IF_ERROR(backend_.Linear(h2, w.in_w, &w.in_b, Activation::kGelu, hidden));
  if (fuse_residual) {
    ASSIGN_OR_RETURN(const Tensor x2, x.Reshape({rows, dims_.d_model}));
    return backend_.LinearResidual(hidden, w.out_w, &w.out_b, Activation::kNone, x2, x2);
  }
  RETURN_IF_ERROR(backend_.Linear(hidden, w.out_w, &w.out_b, Activation::kNone, h2));
  return backend_.Add(x, h, x);
}

// Pre-norm attention block: x += out_proj(attention(norm(x))). With `k_cache`/`v_cache` undefined
// this is encoder self-attention; with a cache and positions the new keys/values are appended
// first (decoder self-attention); with a cache and no positions the cache is read only
// (cross-attention over the encoder output).
absl::Status WhisperModel::RunAttention(const AttentionWeights& w, const Tensor& x,
                                        const Tensor& k_cache, const Tensor& v_cache,
                                        const Tensor* positions, const Tensor* lengths, bool causal,
                                        const Tensor& out, const Workspace& ws,
                                        bool fuse_residual) const {
  const Tensor &h = ws.h, &q = ws.q, &attended = ws.attended;
  RETURN_IF_ERROR(backend_.LayerNorm(x, w.norm_gamma, w.norm_beta, 1e-5f, h));
  // A decoder step's Q, K and V in one GEMM where the backend has it (Op::kLinearPlanes), and
  // with one token per row K and V written straight into the caches (Op::kLinearPlanesAppend).
  const bool stacked = positions != nullptr && w.qkv_w.defined();
  const bool append = stacked && k_cache.defined() && backend_.supports(Op::kLinearPlanesAppend) &&
                      h.numel() == positions->numel() * dims_.d_model;
  if (!stacked) RETURN_IF_ERROR(backend_.Linear(h, w.q_w, &w.q_b, Activation::kNone, q));
  Tensor keys = k_cache, values = v_cache;
  if (append) {
    const Tensor planes[] = {q, k_cache, v_cache};
    RETURN_IF_ERROR(backend_.LinearPlanesAppend(h, w.qkv_w, &w.qkv_b, planes,
                                                /*first_appended=*/1, *positions));
  } else if (!k_cache.defined() || positions != nullptr) {
    const Tensor &k = ws.k, &v = ws.v;
    if (stacked) {
      const Tensor planes[] = {q, k, v};
      RETURN_IF_ERROR(backend_.LinearPlanes(h, w.qkv_w, &w.qkv_b, planes));
    } else {
      RETURN_IF_ERROR(backend_.Linear(h, w.k_w, &w.k_b, Activation::kNone, k));
      RETURN_IF_ERROR(backend_.Linear(h, w.v_w, &w.v_b, Activation::kNone, v));
    }
    if (k_cache.defined()) {
      RETURN_IF_ERROR(backend_.WriteRows(k, *positions, k_cache));
      RETURN_IF_ERROR(backend_.WriteRows(v, *positions, v_cache));
    } else {
      keys = k;
      values = v;
    }
  }
  RETURN_IF_ERROR(backend_.Attention(q, keys, values, lengths, dims_.n_heads, attention_scale_,
                                     causal, attended));
  if (fuse_residual) {
    return backend_.LinearResidual(attended, w.out_w, &w.out_b, Activation::kNone, x, x);
  }
  RETURN_IF_ERROR(backend_.Linear(attended, w.out_w, &w.out_b, Activation::kNone, out));
  return backend_.Add(x, out, x);
}

absl::StatusOr<std::vector<float>> WhisperModel::Decode(absl::Span<const int32_t> tokens,
                                                        int tokens_per_row,
                                                        absl::Span<const int32_t> positions,
                                                        DecoderState& state) const {
  const int64_t b = state.batch_size(), t = tokens_per_row;
  if (t <= 0 || static_cast<int64_t>(tokens.size()) != b * t ||
      static_cast<int64_t>(positions.size()) != b) {
    return absl::InvalidArgumentError(absl::StrCat("Decode: ", tokens.size(), " tokens and ",
                                                   positions.size(), " positions for batch ", b,
                                                   " x ", t));
  }
  std::vector<int32_t> lengths(positions.begin(), positions.end());
  for (int32_t& length : lengths) {
    if (length < 0 || length + t > dims_.n_text_ctx) {
      return absl::OutOfRangeError(absl::StrCat("decoder context of ", dims_.n_text_ctx,
                                                " tokens exceeded (position ", length, " + ", t,
                                                ")"));
    }
    length += static_cast<int32_t>(t);
  }
  for (int32_t token : tokens) {
    if (token < 0 || token >= dims_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " is outside the vocabulary"));
    }
  }
  if (t == 1) {
    std::vector<float> logits;
    RETURN_IF_ERROR(DecodeStepToHost(tokens, positions, state, static_cast<int>(b), logits));
    return logits;
  }
  RETURN_IF_ERROR(backend_.CopyFromHost(positions.data(), positions.size() * 4, state.positions_));
  RETURN_IF_ERROR(backend_.CopyFromHost(lengths.data(), lengths.size() * 4, state.lengths_));
  ASSIGN_OR_RETURN(const Tensor token_ids, Upload(backend_, {b, t}, DType::kI32, tokens.data()));
  ASSIGN_OR_RETURN(const Tensor x, DecoderForward(token_ids, state));
  // Only each row's last position needs logits.
  ASSIGN_OR_RETURN(const Tensor logits, LogitsAt(x, std::vector<int64_t>(b, t - 1)));
  return Download<float>(backend_, logits);
}

absl::StatusOr<Tensor> WhisperModel::DecoderForward(const Tensor& token_ids,
                                                    DecoderState& state) const {
  const int64_t b = token_ids.dim(0), t = token_ids.dim(1), d = dims_.d_model;
  ASSIGN_OR_RETURN(Tensor x, backend_.Allocate({b, t, d}, DType::kF32));
  ASSIGN_OR_RETURN(Tensor scratch, backend_.Allocate({b, t, d}, DType::kF32));
  ASSIGN_OR_RETURN(const Workspace ws, NewWorkspace(x.shape()));
  RETURN_IF_ERROR(DecoderForwardInto(token_ids, state, x, scratch, ws));
  return x;
}

absl::Status WhisperModel::DecoderForwardInto(const Tensor& token_ids, DecoderState& state,
                                              const Tensor& x, const Tensor& scratch,
                                              const Workspace& ws) const {
  RETURN_IF_ERROR(
      backend_.Embed(token_ids, state.positions_, token_embedding_, decoder_positions_, x));
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    const DecoderLayer& layer = decoder_layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(RunAttention(layer.self_attention, x, state.self_k_[i], state.self_v_[i],
                                 &state.positions_, &state.lengths_, /*causal=*/true, scratch, ws));
    RETURN_IF_ERROR(RunAttention(layer.cross_attention, x, state.cross_k_[i], state.cross_v_[i],
                                 nullptr, state.cross_lengths(), /*causal=*/false, scratch, ws));
    RETURN_IF_ERROR(RunFeedForward(layer.ffn, x, ws));
  }
  return backend_.LayerNorm(x, decoder_norm_gamma_, decoder_norm_beta_, 1e-5f, x);
}

absl::StatusOr<Tensor> WhisperModel::LogitsAt(const Tensor& x,
                                              absl::Span<const int64_t> index) const {
  const int64_t b = x.dim(0), t = x.dim(1), d = dims_.d_model;
  ASSIGN_OR_RETURN(Tensor flat, x.Reshape({b * t, d}));
  Tensor last;
  if (t == 1) {
    last = flat;
  } else {
    ASSIGN_OR_RETURN(last, backend_.Allocate({b, d}, DType::kF32));
    std::vector<int64_t> rows(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i)
      rows[static_cast<size_t>(i)] = i * t + index[static_cast<size_t>(i)];
    RETURN_IF_ERROR(backend_.GatherRows(flat, rows, last));
  }
  ASSIGN_OR_RETURN(Tensor logits, backend_.Allocate({b, dims_.n_vocab}, DType::kF32));
  RETURN_IF_ERROR(backend_.Linear(last, token_embedding_, nullptr, Activation::kNone, logits));
  return logits;
}

absl::StatusOr<Tensor> WhisperModel::PrefillRows(absl::Span<const std::vector<int32_t>> tokens,
                                                 absl::Span<const int> read_at,
                                                 DecoderState& state) const {
  const int64_t b = state.batch_size();
  if (static_cast<int64_t>(tokens.size()) != b ||
      (!read_at.empty() && static_cast<int64_t>(read_at.size()) != b)) {
    return absl::InvalidArgumentError(absl::StrCat("PrefillRows: ", tokens.size(), " rows and ",
                                                   read_at.size(), " read positions for batch ",
                                                   b));
  }
  int64_t t = 0;
  for (const std::vector<int32_t>& row : tokens) t = std::max(t, static_cast<int64_t>(row.size()));
  if (t == 0) return absl::InvalidArgumentError("PrefillRows: no row has a token to feed");
  if (t > dims_.n_text_ctx) {
    return absl::OutOfRangeError(absl::StrCat("decoder context of ", dims_.n_text_ctx,
                                              " tokens exceeded (a prompt of ", t, " tokens)"));
  }
  // A few padded lengths serve every prompt: with graphs one capture each, then replays. Eager
  // pads the same way, so that both run the same kernels on the same shapes (the same values).
  t = std::min<int64_t>((t + 7) / 8 * 8, dims_.n_text_ctx);
  // Rows padded to t with their last token (0 for an empty row): the padding's K/V land at
  // positions past the row's tokens, which the row's next steps overwrite before attending to.
  std::vector<int32_t> flat(static_cast<size_t>(b * t), 0);
  bool any_read = false;
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<int32_t>& row = tokens[static_cast<size_t>(i)];
    for (int32_t token : row) {
      if (token < 0 || token >= dims_.n_vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", token, " is outside the vocabulary"));
      }
    }
    const int32_t pad = row.empty() ? 0 : row.back();
    std::copy(row.begin(), row.end(), flat.begin() + i * t);
    std::fill(flat.begin() + i * t + static_cast<int64_t>(row.size()), flat.begin() + (i + 1) * t,
              pad);
    if (!read_at.empty()) {
      const int at = read_at[static_cast<size_t>(i)];
      if (at < -1 || at >= static_cast<int>(row.size())) {
        return absl::InvalidArgumentError(absl::StrCat("PrefillRows: read_at[", i, "] = ", at,
                                                       " for a row of ", row.size(), " tokens"));
      }
      any_read = any_read || at >= 0;
    }
  }
  const std::vector<int32_t> positions(static_cast<size_t>(b), 0);
  const std::vector<int32_t> lengths(static_cast<size_t>(b), static_cast<int32_t>(t));
  RETURN_IF_ERROR(backend_.CopyFromHost(positions.data(), positions.size() * 4, state.positions_));
  RETURN_IF_ERROR(backend_.CopyFromHost(lengths.data(), lengths.size() * 4, state.lengths_));
  Tensor x;
  if (use_graphs_) {
    ASSIGN_OR_RETURN(DecoderState::Prefill * prefill, PrefillBuffers(static_cast<int>(t), state));
    RETURN_IF_ERROR(
        backend_.CopyFromHost(flat.data(), flat.size() * sizeof(int32_t), prefill->token_ids));
    const Tensor* keys[] = {&prefill->token_ids, &prefill->x, &state.positions_};
    RETURN_IF_ERROR(prefill->graph.Run(backend_, /*use_graph=*/true, keys, [&] {
      return DecoderForwardInto(prefill->token_ids, state, prefill->x, prefill->scratch,
                                prefill->ws);
    }));
    x = prefill->x;
  } else {
    ASSIGN_OR_RETURN(const Tensor token_ids, Upload(backend_, {b, t}, DType::kI32, flat.data()));
    ASSIGN_OR_RETURN(x, DecoderForward(token_ids, state));
  }
  if (!any_read) return Tensor();
  std::vector<int64_t> index(static_cast<size_t>(b), t - 1);
  for (int64_t i = 0; i < b; ++i) {
    if (read_at[static_cast<size_t>(i)] >= 0)
      index[static_cast<size_t>(i)] = read_at[static_cast<size_t>(i)];
  }
  return LogitsAt(x, index);
}

absl::StatusOr<DecoderState::Prefill*> WhisperModel::PrefillBuffers(int tokens,
                                                                    DecoderState& state) const {
  std::vector<std::unique_ptr<DecoderState::Prefill>>& kept = state.prefills_;
  ++state.prefill_clock_;
  for (const auto& p : kept) {
    if (p->tokens == tokens) {
      p->last_used = state.prefill_clock_;
      return p.get();
    }
  }
  if (kept.size() >= DecoderState::kMaxPrefills) {  // the least recently used length goes
    kept.erase(std::min_element(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
      return a->last_used < b->last_used;
    }));
  }
  auto p = std::make_unique<DecoderState::Prefill>();
  p->tokens = tokens;
  p->last_used = state.prefill_clock_;
  const Shape shape{state.batch_size(), tokens, dims_.d_model};
  ASSIGN_OR_RETURN(p->token_ids, backend_.Allocate({state.batch_size(), tokens}, DType::kI32));
  ASSIGN_OR_RETURN(p->x, backend_.Allocate(shape, DType::kF32));
  ASSIGN_OR_RETURN(p->scratch, backend_.Allocate(shape, DType::kF32));
  ASSIGN_OR_RETURN(p->ws, NewWorkspace(shape));
  kept.push_back(std::move(p));
  return kept.back().get();
}

absl::Status WhisperModel::DecodeStepAsync(absl::Span<const int32_t> tokens,
                                           absl::Span<const int32_t> positions,
                                           DecoderState& state) const {
  RETURN_IF_ERROR(WriteStepInputs(tokens, positions, state));
  return RunDecodeStep(state);
}

absl::Status WhisperModel::WriteStepInputs(absl::Span<const int32_t> tokens,
                                           absl::Span<const int32_t> positions,
                                           DecoderState& state) const {
  const int64_t b = state.batch_size();
  if (static_cast<int64_t>(tokens.size()) != b || static_cast<int64_t>(positions.size()) != b) {
    return absl::InvalidArgumentError(absl::StrCat("WriteStepInputs: ", tokens.size(),
                                                   " tokens and ", positions.size(),
                                                   " positions for batch ", b));
  }
  std::vector<int32_t> lengths(positions.begin(), positions.end());
  for (int32_t& length : lengths) {
    if (length < 0 || length + 1 > dims_.n_text_ctx) {
      return absl::OutOfRangeError(absl::StrCat("decoder context of ", dims_.n_text_ctx,
                                                " tokens exceeded (position ", length, " + 1)"));
    }
    length += 1;
  }
  for (int32_t token : tokens) {
    if (token < 0 || token >= dims_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " is outside the vocabulary"));
    }
  }
  RETURN_IF_ERROR(backend_.CopyFromHost(positions.data(), positions.size() * 4, state.positions_));
  RETURN_IF_ERROR(backend_.CopyFromHost(lengths.data(), lengths.size() * 4, state.lengths_));
  return backend_.CopyFromHost(tokens.data(), tokens.size() * 4, state.step_.tokens);
}

absl::Status WhisperModel::DecodeStepToHost(absl::Span<const int32_t> tokens,
                                            absl::Span<const int32_t> positions,
                                            DecoderState& state, int rows_out,
                                            std::vector<float>& logits) const {
  if (rows_out < 1 || rows_out > state.batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeStepToHost: ", rows_out, " rows out for batch ", state.batch_size()));
  }
  RETURN_IF_ERROR(DecodeStepAsync(tokens, positions, state));
  ASSIGN_OR_RETURN(const Tensor out, state.step_.logits.Slice(0, rows_out));
  logits.resize(static_cast<size_t>(out.numel()));
  return backend_.CopyToHost(out, logits.data(), out.size_bytes());
}

DecoderStepIo WhisperModel::PreparedStepIo(const DecoderState& state) const {
  DecoderStepIo io;
  io.tokens = state.step_.tokens;
  io.positions = state.positions_;
  io.lengths = state.lengths_;
  io.self_k = state.self_k_;
  io.self_v = state.self_v_;
  io.cross_k = state.cross_k_;
  io.cross_v = state.cross_v_;
  io.logits = state.step_.logits;
  return io;
}

absl::Status WhisperModel::DecodeStep(DecoderState& state) const {
  const DecoderState::StepBuffers& s = state.step_;
  const bool short_window = state.holds_short_window();
  if (prepared_step_ != nullptr && state.batch_size() <= prepared_step_->max_batch() &&
      !short_window) {
    return prepared_step_->Run(PreparedStepIo(state));
  }
  const Workspace ws{s.h, s.q, s.k, s.v, s.attended, s.hidden};
  // The residual additions in the projections' epilogues, and the FFN's normed input and hidden
  // layer in f16 (what the GEMMs read), where the backend has them (as in the encoder).
  const bool fuse = backend_.supports(Op::kLinearResidual);
  Workspace ffn_ws = ws;
  if (s.ffn_h.defined()) {
    ffn_ws.h = s.ffn_h;
    ffn_ws.hidden = s.ffn_hidden;
  }
  RETURN_IF_ERROR(
      backend_.Embed(s.tokens, state.positions_, token_embedding_, decoder_positions_, s.x));
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    const DecoderLayer& layer = decoder_layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(RunAttention(layer.self_attention, s.x, state.self_k_[i], state.self_v_[i],
                                 &state.positions_, &state.lengths_, /*causal=*/true, s.out, ws,
                                 fuse));
    if (absorbed_cross_ && !short_window) {
      RETURN_IF_ERROR(RunAbsorbedCross(i, s.x, state, ws, fuse));
    } else {
      RETURN_IF_ERROR(RunAttention(layer.cross_attention, s.x, state.cross_k_[i], state.cross_v_[i],
                                   nullptr, state.cross_lengths(), /*causal=*/false, s.out, ws,
                                   fuse));
    }
    RETURN_IF_ERROR(RunFeedForward(layer.ffn, s.x, ffn_ws, fuse));
  }
  // The final norm into the f16 FFN input buffer where there is one (the logits' GEMM then reads
  // it without a conversion kernel; it rounded it to f16 anyway).
  const Tensor& normed =
      s.ffn_h.defined() && token_embedding_.dtype() == DType::kF16 ? s.ffn_h : s.x;
  RETURN_IF_ERROR(backend_.LayerNorm(s.x, decoder_norm_gamma_, decoder_norm_beta_, 1e-5f, normed));
  ASSIGN_OR_RETURN(const Tensor last, normed.Reshape({state.batch_size(), dims_.d_model}));
  return backend_.Linear(last, token_embedding_, nullptr, Activation::kNone, s.logits);
}

absl::Status WhisperModel::RunDecodeStep(DecoderState& state) const {
  GraphCache& graph = state.holds_short_window() ? state.short_step_graph_ : state.step_graph_;
  return graph.Run(backend_, use_graphs_, StepTensors(state), [&] { return DecodeStep(state); });
}

absl::Status WhisperModel::RunDecodeStepAndChoose(DecoderState& state,
                                                  const StepChoice& choice) const {
  std::vector<const Tensor*> tensors = StepTensors(state);
  for (const Tensor* t : {&choice.masks, &choice.mask_index, &choice.out}) tensors.push_back(t);
  const DecoderStepChoice made{choice.masks, choice.mask_index, choice.out, dims_.n_text_ctx - 1};
  GraphCache& graphs =
      state.holds_short_window() ? state.short_choice_graphs_ : state.choice_graphs_;
  return graphs.Run(backend_, use_graphs_, tensors, [&]() -> absl::Status {
    if (ChoosesInStep(state)) return prepared_step_->RunAndChoose(PreparedStepIo(state), made);
    RETURN_IF_ERROR(DecodeStep(state));
    RETURN_IF_ERROR(
        backend_.ArgmaxLogSumExp(state.step_.logits, choice.masks, choice.mask_index, choice.out));
    if (!backend_.supports(Op::kFeedChoices)) return absl::OkStatus();
    return backend_.FeedChoices(choice.out, choice.mask_index, made.max_position,
                                state.step_.tokens, state.positions_, state.lengths_);
  });
}

bool WhisperModel::ChoosesInStep(const DecoderState& state) const {
  if (state.holds_short_window()) return false;  // the prepared step reads every key
  if (!state.chooses_in_step_.has_value()) {
    const int rows_limit =
        step_choice_ == GraphUse::kAuto ? kStepChoiceAutoRows : std::numeric_limits<int>::max();
    state.chooses_in_step_ =
        step_choice_ != GraphUse::kNever && prepared_step_ != nullptr &&
        state.batch_size() <= std::min(rows_limit, prepared_step_->max_batch()) &&
        prepared_step_->ChoosesInStep(PreparedStepIo(state));
  }
  return *state.chooses_in_step_;
}

std::vector<const Tensor*> WhisperModel::StepTensors(const DecoderState& state) const {
  const DecoderState::StepBuffers& s = state.step_;
  std::vector<const Tensor*> tensors = {&state.cross_lengths_,
                                        &s.tokens,
                                        &s.x,
                                        &s.out,
                                        &s.h,
                                        &s.q,
                                        &s.k,
                                        &s.v,
                                        &s.attended,
                                        &s.hidden,
                                        &s.ffn_h,
                                        &s.ffn_hidden,
                                        &s.logits,
                                        &s.absorbed_q,
                                        &s.absorbed_out,
                                        &state.cross_source_,
                                        &state.cross_source_scales_,
                                        &state.positions_,
                                        &state.lengths_};
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    const size_t l = static_cast<size_t>(i);
    for (const Tensor* t :
         {&state.self_k_[l], &state.self_v_[l], &state.cross_k_[l], &state.cross_v_[l]}) {
      tensors.push_back(t);
    }
  }
  return tensors;
}

}  // namespace waav::whisper
