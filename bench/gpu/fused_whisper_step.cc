#include "bench/gpu/fused_whisper_step.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/models/ct2/model_file.h"
#include "engine/runtime/status.h"

namespace waav::bench {

absl::StatusOr<Tensor> LoadVariable(Backend& backend, const ct2::ModelFile& file,
                                    const std::string& name, DType dtype) {
  ASSIGN_OR_RETURN(const ct2::Variable* var, file.Get(name));
  const bool f16 = var->type == ct2::VarType::kF16;
  if (!f16 && var->type != ct2::VarType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is neither f16 nor f32"));
  }
  const int64_t n = var->numel();
  std::vector<uint8_t> host(static_cast<size_t>(n) * SizeOf(dtype));
  for (int64_t i = 0; i < n; ++i) {
    float value;
    if (f16) {
      uint16_t h;
      std::memcpy(&h, var->data() + 2 * i, 2);
      value = HalfToFloat(h);
    } else {
      std::memcpy(&value, var->data() + 4 * i, 4);
    }
    if (dtype == DType::kF32) {
      std::memcpy(host.data() + 4 * i, &value, 4);
    } else {
      const uint16_t h = FloatToHalf(value);
      std::memcpy(host.data() + 2 * i, &h, 2);
    }
  }
  return Upload(backend, Shape(var->shape), dtype, host.data());
}

absl::StatusOr<WhisperDecoderWeights> LoadWhisperDecoderWeights(const std::string& model_dir,
                                                                Backend& backend) {
  ASSIGN_OR_RETURN(ct2::ModelFile file, ct2::ModelFile::Open(model_dir + "/model.bin"));
  WhisperDecoderWeights w;
  ASSIGN_OR_RETURN(const int64_t heads, file.GetScalarInt("decoder/num_heads"));
  w.n_heads = static_cast<int>(heads);
  const DType f16 = DType::kF16, f32 = DType::kF32;
  auto load = [&](const std::string& name, DType dtype) {
    return LoadVariable(backend, file, name, dtype);
  };
  ASSIGN_OR_RETURN(w.token_embedding, load("decoder/embeddings/weight", f16));
  ASSIGN_OR_RETURN(w.positions, load("decoder/position_encodings/encodings", f32));
  ASSIGN_OR_RETURN(w.final_g, load("decoder/layer_norm/gamma", f32));
  ASSIGN_OR_RETURN(w.final_b, load("decoder/layer_norm/beta", f32));
  for (int i = 0; file.Get(absl::StrCat("decoder/layer_", i, "/ffn/linear_0/weight")).ok(); ++i) {
    const std::string p = absl::StrCat("decoder/layer_", i);
    WhisperDecoderWeights::Layer l;
    ASSIGN_OR_RETURN(l.ln1_g, load(p + "/self_attention/layer_norm/gamma", f32));
    ASSIGN_OR_RETURN(l.ln1_b, load(p + "/self_attention/layer_norm/beta", f32));
    ASSIGN_OR_RETURN(l.qkv_w, load(p + "/self_attention/linear_0/weight", f16));  // [3d, d]
    ASSIGN_OR_RETURN(l.qkv_b, load(p + "/self_attention/linear_0/bias", f32));
    ASSIGN_OR_RETURN(l.out_w, load(p + "/self_attention/linear_1/weight", f16));
    ASSIGN_OR_RETURN(l.out_b, load(p + "/self_attention/linear_1/bias", f32));
    ASSIGN_OR_RETURN(l.ln2_g, load(p + "/attention/layer_norm/gamma", f32));
    ASSIGN_OR_RETURN(l.ln2_b, load(p + "/attention/layer_norm/beta", f32));
    ASSIGN_OR_RETURN(l.cq_w, load(p + "/attention/linear_0/weight", f16));
    ASSIGN_OR_RETURN(l.cq_b, load(p + "/attention/linear_0/bias", f32));
    ASSIGN_OR_RETURN(l.cout_w, load(p + "/attention/linear_2/weight", f16));
    ASSIGN_OR_RETURN(l.cout_b, load(p + "/attention/linear_2/bias", f32));
    ASSIGN_OR_RETURN(l.ln3_g, load(p + "/ffn/layer_norm/gamma", f32));
    ASSIGN_OR_RETURN(l.ln3_b, load(p + "/ffn/layer_norm/beta", f32));
    ASSIGN_OR_RETURN(l.ff1_w, load(p + "/ffn/linear_0/weight", f16));
    ASSIGN_OR_RETURN(l.ff1_b, load(p + "/ffn/linear_0/bias", f32));
    ASSIGN_OR_RETURN(l.ff2_w, load(p + "/ffn/linear_1/weight", f16));
    ASSIGN_OR_RETURN(l.ff2_b, load(p + "/ffn/linear_1/bias", f32));
    w.layers.push_back(std::move(l));
  }
  if (w.layers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, "/model.bin has no decoder layers"));
  }
  RETURN_IF_ERROR(backend.Synchronize());
  return w;
}

absl::StatusOr<std::unique_ptr<FusedWhisperDecoder>> FusedWhisperDecoder::Load(
    const std::string& model_dir, Backend& backend) {
  CudaExtensions* ext = GetCudaExtensions(backend);
  if (ext == nullptr) {
    return absl::FailedPreconditionError("the fused decoder step needs the CUDA backend");
  }
  ASSIGN_OR_RETURN(WhisperDecoderWeights weights, LoadWhisperDecoderWeights(model_dir, backend));
  auto dec = std::unique_ptr<FusedWhisperDecoder>(
      new FusedWhisperDecoder(backend, *ext, std::move(weights)));
  dec->d_model_ = static_cast<int>(dec->w_.token_embedding.dim(1));
  return dec;
}

absl::Status FusedWhisperDecoder::Prepare(const whisper::DecoderState& state) {
  batch_ = state.batch_size();
  const int64_t b = batch_, d = d_model_;
  ASSIGN_OR_RETURN(x_, backend_.Allocate({b, 1, d}, DType::kF32));
  ASSIGN_OR_RETURN(q_, backend_.Allocate({b, 1, d}, DType::kF32));
  ASSIGN_OR_RETURN(attended_, backend_.Allocate({b, 1, d}, DType::kF32));
  ASSIGN_OR_RETURN(hidden_, backend_.Allocate({b, w_.layers[0].ff1_w.dim(0)}, DType::kF32));
  return absl::OkStatus();
}

absl::Status FusedWhisperDecoder::Step(const whisper::DecoderState& state) {
  if (state.batch_size() != batch_) {
    return absl::FailedPreconditionError("FusedWhisperDecoder: Prepare() for this batch first");
  }
  using Args = CudaExtensions::FusedLinearArgs;
  using Output = CudaExtensions::Output;
  const int n_heads = w_.n_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_model_ / n_heads));
  RETURN_IF_ERROR(
      backend_.Embed(state.step_tokens(), state.positions(), w_.token_embedding, w_.positions, x_));
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const WhisperDecoderWeights::Layer& l = w_.layers[i];
    const int layer = static_cast<int>(i);
    Args qkv;
    qkv.x = x_;
    qkv.norm_gamma = l.ln1_g;
    qkv.norm_beta = l.ln1_b;
    qkv.weight = l.qkv_w;
    qkv.bias = l.qkv_b;
    qkv.output = Output::kQkv;
    qkv.q = q_;
    qkv.k_cache = state.self_k(layer);
    qkv.v_cache = state.self_v(layer);
    qkv.positions = state.positions();
    RETURN_IF_ERROR(ext_.FusedLinear(qkv));
    RETURN_IF_ERROR(backend_.Attention(q_, state.self_k(layer), state.self_v(layer),
                                       &state.lengths(), n_heads, scale, true, attended_));
    Args out;
    out.x = attended_;
    out.weight = l.out_w;
    out.bias = l.out_b;
    out.output = Output::kAccumulate;
    out.y = x_;
    RETURN_IF_ERROR(ext_.FusedLinear(out));
    Args cross_q;
    cross_q.x = x_;
    cross_q.norm_gamma = l.ln2_g;
    cross_q.norm_beta = l.ln2_b;
    cross_q.weight = l.cq_w;
    cross_q.bias = l.cq_b;
    cross_q.y = q_;
    RETURN_IF_ERROR(ext_.FusedLinear(cross_q));
    RETURN_IF_ERROR(backend_.Attention(q_, state.cross_k(layer), state.cross_v(layer), nullptr,
                                       n_heads, scale, false, attended_));
    Args cross_out = out;
    cross_out.weight = l.cout_w;
    cross_out.bias = l.cout_b;
    RETURN_IF_ERROR(ext_.FusedLinear(cross_out));
    Args ff1;
    ff1.x = x_;
    ff1.norm_gamma = l.ln3_g;
    ff1.norm_beta = l.ln3_b;
    ff1.weight = l.ff1_w;
    ff1.bias = l.ff1_b;
    ff1.act = Activation::kGelu;
    ff1.y = hidden_;
    RETURN_IF_ERROR(ext_.FusedLinear(ff1));
    Args ff2;
    ff2.x = hidden_;
    ff2.weight = l.ff2_w;
    ff2.bias = l.ff2_b;
    ff2.output = Output::kAccumulate;
    ff2.y = x_;
    RETURN_IF_ERROR(ext_.FusedLinear(ff2));
  }
  Args logits;
  logits.x = x_;
  logits.norm_gamma = w_.final_g;
  logits.norm_beta = w_.final_b;
  logits.weight = w_.token_embedding;
  logits.y = state.step_logits();
  return ext_.FusedLinear(logits);
}

}  // namespace waav::bench
