#include "bench/gpu/persistent_whisper_step.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "bench/gpu/fused_whisper_step.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::bench {

absl::StatusOr<std::unique_ptr<PersistentWhisperDecoder>> PersistentWhisperDecoder::Load(
    const std::string& model_dir, Backend& backend) {
  CudaExtensions* ext = GetCudaExtensions(backend);
  if (ext == nullptr) {
    return absl::FailedPreconditionError("the persistent decoder step needs the CUDA backend");
  }
  ASSIGN_OR_RETURN(WhisperDecoderWeights weights, LoadWhisperDecoderWeights(model_dir, backend));
  auto dec = std::unique_ptr<PersistentWhisperDecoder>(
      new PersistentWhisperDecoder(backend, *ext, std::move(weights)));
  const WhisperDecoderWeights& w = dec->w_;
  DecoderStepWeights& s = dec->step_weights_;
  const int d_model = static_cast<int>(w.token_embedding.dim(1));
  s.dims.d_model = d_model;
  s.dims.n_heads = w.n_heads;
  s.dims.ffn_dim = static_cast<int>(w.layers[0].ff1_w.dim(0));
  s.dims.n_layers = static_cast<int>(w.layers.size());
  s.dims.n_vocab = static_cast<int>(w.token_embedding.dim(0));
  s.dims.n_positions = static_cast<int>(w.positions.dim(0));
  s.dims.attention_scale = 1.0f / std::sqrt(static_cast<float>(d_model / w.n_heads));
  const absl::Status supported = cuda::CheckPersistentStepDims(s.dims);
  if (!supported.ok()) {
    return absl::UnimplementedError(absl::StrCat(model_dir, ": ", supported.message()));
  }
  s.token_embedding = w.token_embedding;
  s.position_table = w.positions;
  s.final_norm_gamma = w.final_g;
  s.final_norm_beta = w.final_b;
  const int64_t d = d_model;
  for (const WhisperDecoderWeights::Layer& l : w.layers) {
    DecoderStepLayerWeights sl;
    ASSIGN_OR_RETURN(sl.q_w, l.qkv_w.Slice(0, d));
    ASSIGN_OR_RETURN(sl.k_w, l.qkv_w.Slice(d, 2 * d));
    ASSIGN_OR_RETURN(sl.v_w, l.qkv_w.Slice(2 * d, 3 * d));
    ASSIGN_OR_RETURN(sl.q_b, l.qkv_b.Slice(0, d));
    ASSIGN_OR_RETURN(sl.k_b, l.qkv_b.Slice(d, 2 * d));
    ASSIGN_OR_RETURN(sl.v_b, l.qkv_b.Slice(2 * d, 3 * d));
    sl.self_norm_gamma = l.ln1_g;
    sl.self_norm_beta = l.ln1_b;
    sl.out_w = l.out_w;
    sl.out_b = l.out_b;
    sl.cross_norm_gamma = l.ln2_g;
    sl.cross_norm_beta = l.ln2_b;
    sl.cross_q_w = l.cq_w;
    sl.cross_q_b = l.cq_b;
    sl.cross_out_w = l.cout_w;
    sl.cross_out_b = l.cout_b;
    sl.ffn_norm_gamma = l.ln3_g;
    sl.ffn_norm_beta = l.ln3_b;
    sl.ff1_w = l.ff1_w;
    sl.ff1_b = l.ff1_b;
    sl.ff2_w = l.ff2_w;
    sl.ff2_b = l.ff2_b;
    s.layers.push_back(std::move(sl));
  }
  return dec;
}

absl::Status PersistentWhisperDecoder::Prepare(const whisper::DecoderState& state,
                                               const PersistentStepOptions& options) {
  const int b = state.batch_size();
  if (b < 1 || b > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("the persistent decoder step takes 1 to ", kMaxBatch, " rows, not ", b));
  }
  if (state.self_k(0).dim(1) != step_weights_.dims.n_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("the state's self cache has ", state.self_k(0).dim(1),
                     " rows; the model's position table ", step_weights_.dims.n_positions));
  }
  if (state.cross_k(0).dtype() != DType::kF32) {
    // Its f32 cross variant and RefreshCross() read the state's f32 caches.
    return absl::InvalidArgumentError(
        "the benchmark's persistent step takes decoder states with f32 cross K/V "
        "(WhisperModelOptions::half_cross_cache = false)");
  }
  step_weights_.dims.n_source = static_cast<int>(state.cross_k(0).dim(1));
  ASSIGN_OR_RETURN(
      step_, cuda::PersistentDecoderStep::Create(backend_, ext_, step_weights_, options.tuning));
  batch_ = b;
  options_ = options;
  ASSIGN_OR_RETURN(best_token_, backend_.Allocate({b}, DType::kI32));
  ASSIGN_OR_RETURN(best_logprob_, backend_.Allocate({b}, DType::kF32));
  ASSIGN_OR_RETURN(logsumexp_, backend_.Allocate({b}, DType::kF32));
  cross_k16_.clear();
  cross_v16_.clear();
  if (options.f16_cross) {
    for (size_t i = 0; i < w_.layers.size(); ++i) {
      const Shape shape = state.cross_k(static_cast<int>(i)).shape();
      ASSIGN_OR_RETURN(Tensor k, backend_.Allocate(shape, DType::kF16));
      ASSIGN_OR_RETURN(Tensor v, backend_.Allocate(shape, DType::kF16));
      cross_k16_.push_back(k);
      cross_v16_.push_back(v);
    }
  }
  return SetSuppressedTokens({});
}

absl::Status PersistentWhisperDecoder::SetSuppressedTokens(absl::Span<const int32_t> tokens) {
  const int vocab = step_weights_.dims.n_vocab;
  std::vector<int32_t> bits(static_cast<size_t>((vocab + 31) / 32), 0);
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("suppressed token ", t, " is outside the vocabulary of ", vocab));
    }
    bits[static_cast<size_t>(t / 32)] |= static_cast<int32_t>(1u << (t % 32));
  }
  if (tokens.empty()) {
    suppress_bits_ = Tensor();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(suppress_bits_,
                   Upload(backend_, {static_cast<int64_t>(bits.size())}, DType::kI32, bits.data()));
  return absl::OkStatus();
}

absl::Status PersistentWhisperDecoder::RefreshCross(const whisper::DecoderState& state) {
  if (state.batch_size() != batch_) {
    return absl::FailedPreconditionError("PersistentWhisperDecoder: Prepare() for this batch");
  }
  if (!options_.f16_cross) return absl::OkStatus();
  std::vector<Tensor> keep;
  std::vector<const float*> src;
  std::vector<__half*> dst;
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const int layer = static_cast<int>(i);
    for (const auto& [from, to] :
         {std::pair<const Tensor*, const Tensor*>{&state.cross_k(layer), &cross_k16_[i]},
          {&state.cross_v(layer), &cross_v16_[i]}}) {
      keep.push_back(*from);
      keep.push_back(*to);
      src.push_back(from->data_as<float>());
      dst.push_back(to->data_as<__half>());
    }
  }
  const int64_t n = state.cross_k(0).numel();
  return ext_.LaunchRaw("PersistentWhisperDecoder::RefreshCross",
                        [src, dst, n](const cuda::LaunchContext& ctx) {
                          for (size_t i = 0; i < src.size(); ++i) {
                            const cudaError_t err = cuda::LaunchFloatToHalf(ctx, src[i], dst[i], n);
                            if (err != cudaSuccess) return static_cast<int>(err);
                          }
                          return static_cast<int>(cudaSuccess);
                        },
                        std::move(keep), {1, n});
}

absl::Status PersistentWhisperDecoder::Step(const whisper::DecoderState& state) {
  if (state.batch_size() != batch_ || step_ == nullptr) {
    return absl::FailedPreconditionError("PersistentWhisperDecoder: Prepare() for this batch");
  }
  DecoderStepIo io;
  io.tokens = state.step_tokens();
  io.positions = state.positions();
  io.lengths = state.lengths();
  io.logits = state.step_logits();
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const int layer = static_cast<int>(i);
    io.self_k.push_back(state.self_k(layer));
    io.self_v.push_back(state.self_v(layer));
    io.cross_k.push_back(options_.f16_cross ? cross_k16_[i] : state.cross_k(layer));
    io.cross_v.push_back(options_.f16_cross ? cross_v16_[i] : state.cross_v(layer));
  }
  cuda::PersistentDecoderStep::Extras extras;
  extras.best_token = best_token_;
  extras.best_logprob = best_logprob_;
  extras.logsumexp = logsumexp_;
  extras.suppress_bits = suppress_bits_;
  extras.write_logits = options_.write_logits;
  return step_->RunWith(io, extras);
}

}  // namespace waav::bench
