#include "bench/gpu/persistent_whisper_step.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "bench/gpu/fused_whisper_step.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::bench {
namespace {

absl::Status GpuError(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

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
  const int d_model = static_cast<int>(w.token_embedding.dim(1));
  const int ffn = static_cast<int>(w.layers[0].ff1_w.dim(0));
  if (!cuda::PersistentDecoderSupported(1, static_cast<int>(w.layers.size()), d_model, w.n_heads,
                                        ffn) ||
      w.positions.dim(1) != d_model) {
    return absl::UnimplementedError(absl::StrCat(
        "the persistent decoder step takes Whisper tiny's decoder (d_model ",
        cuda::kPersistentDModel, ", ", cuda::kPersistentHeads, " heads, FFN ", cuda::kPersistentFfn,
        ", <= ", cuda::kPersistentMaxLayers, " layers); ", model_dir, " has d_model ", d_model,
        ", ", w.n_heads, " heads, FFN ", ffn, ", ", w.layers.size(), " layers"));
  }
  dec->vocab_ = static_cast<int>(w.token_embedding.dim(0));
  dec->text_ctx_ = static_cast<int>(w.positions.dim(0));
  dec->scale_ = 1.0f / std::sqrt(static_cast<float>(d_model / w.n_heads));
  return dec;
}

absl::Status PersistentWhisperDecoder::Prepare(const whisper::DecoderState& state,
                                               const PersistentStepOptions& options) {
  const int b = state.batch_size();
  if (b < 1 || b > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("the persistent decoder step takes 1 to ", kMaxBatch, " rows, not ", b));
  }
  if (options.cross_split_keys < 1 || options.self_split_keys < 1) {
    return absl::InvalidArgumentError("split sizes must be >= 1");
  }
  if (state.self_k(0).dim(1) != text_ctx_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the state's self cache has ", state.self_k(0).dim(1),
                     " rows; the model's position table ", text_ctx_));
  }
  int device = 0;
  RETURN_IF_ERROR(GpuError("cudaGetDevice", cudaGetDevice(&device)));
  RETURN_IF_ERROR(
      GpuError("cudaDeviceGetAttribute",
               cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device)));
  batch_ = b;
  options_ = options;
  if (options_.logits_prefetch_layer == -2) {
    options_.logits_prefetch_layer = static_cast<int>(w_.layers.size()) - 1;
  }
  audio_ctx_ = static_cast<int>(state.cross_k(0).dim(1));
  const size_t floats = cuda::PersistentWorkspaceFloats(
      b, audio_ctx_, text_ctx_, options.cross_split_keys, options.self_split_keys, sm_count_);
  ASSIGN_OR_RETURN(workspace_, backend_.Allocate({static_cast<int64_t>(floats)}, DType::kF32));
  const std::vector<int32_t> zeros(cuda::kPersistentSyncWords, 0);
  ASSIGN_OR_RETURN(sync_,
                   Upload(backend_, {cuda::kPersistentSyncWords}, DType::kI32, zeros.data()));
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
  std::vector<int32_t> bits(static_cast<size_t>((vocab_ + 31) / 32), 0);
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_) {
      return absl::InvalidArgumentError(
          absl::StrCat("suppressed token ", t, " is outside the vocabulary of ", vocab_));
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
  if (state.batch_size() != batch_ || !workspace_.defined()) {
    return absl::FailedPreconditionError("PersistentWhisperDecoder: Prepare() for this batch");
  }
  cuda::PersistentDecoderParams p;
  p.batch = batch_;
  p.n_layers = static_cast<int>(w_.layers.size());
  p.vocab = vocab_;
  p.text_ctx = text_ctx_;
  p.audio_ctx = audio_ctx_;
  p.scale = scale_;
  p.tokens = state.step_tokens().data_as<int32_t>();
  p.positions = state.positions().data_as<int32_t>();
  p.lengths = state.lengths().data_as<int32_t>();
  p.token_embedding = w_.token_embedding.data_as<__half>();
  p.position_table = w_.positions.data_as<float>();
  std::vector<Tensor> keep = {w_.token_embedding,  w_.positions,      w_.final_g,
                              w_.final_b,          workspace_,        sync_,
                              best_token_,         best_logprob_,     logsumexp_,
                              state.step_tokens(), state.positions(), state.lengths(),
                              state.step_logits()};
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const WhisperDecoderWeights::Layer& l = w_.layers[i];
    cuda::PersistentDecoderLayer& w = p.layers[i];
    w.ln1_g = l.ln1_g.data_as<float>();
    w.ln1_b = l.ln1_b.data_as<float>();
    w.qkv_w = l.qkv_w.data_as<__half>();
    w.qkv_b = l.qkv_b.data_as<float>();
    w.out_w = l.out_w.data_as<__half>();
    w.out_b = l.out_b.data_as<float>();
    w.ln2_g = l.ln2_g.data_as<float>();
    w.ln2_b = l.ln2_b.data_as<float>();
    w.cq_w = l.cq_w.data_as<__half>();
    w.cq_b = l.cq_b.data_as<float>();
    w.cout_w = l.cout_w.data_as<__half>();
    w.cout_b = l.cout_b.data_as<float>();
    w.ln3_g = l.ln3_g.data_as<float>();
    w.ln3_b = l.ln3_b.data_as<float>();
    w.ff1_w = l.ff1_w.data_as<__half>();
    w.ff1_b = l.ff1_b.data_as<float>();
    w.ff2_w = l.ff2_w.data_as<__half>();
    w.ff2_b = l.ff2_b.data_as<float>();
    for (const Tensor* t : {&l.ln1_g, &l.ln1_b, &l.qkv_w, &l.qkv_b, &l.out_w, &l.out_b, &l.ln2_g,
                            &l.ln2_b, &l.cq_w, &l.cq_b, &l.cout_w, &l.cout_b, &l.ln3_g, &l.ln3_b,
                            &l.ff1_w, &l.ff1_b, &l.ff2_w, &l.ff2_b}) {
      keep.push_back(*t);
    }
    const int layer = static_cast<int>(i);
    p.self_k[i] = state.self_k(layer).data_as<float>();
    p.self_v[i] = state.self_v(layer).data_as<float>();
    keep.push_back(state.self_k(layer));
    keep.push_back(state.self_v(layer));
    const Tensor& ck = options_.f16_cross ? cross_k16_[i] : state.cross_k(layer);
    const Tensor& cv = options_.f16_cross ? cross_v16_[i] : state.cross_v(layer);
    p.cross_k[i] = ck.data();
    p.cross_v[i] = cv.data();
    keep.push_back(ck);
    keep.push_back(cv);
  }
  p.cross_f16 = options_.f16_cross;
  p.final_g = w_.final_g.data_as<float>();
  p.final_b = w_.final_b.data_as<float>();
  p.workspace = workspace_.data_as<float>();
  p.workspace_floats = static_cast<size_t>(workspace_.numel());
  p.sync = sync_.data_as<unsigned>();
  p.logits = options_.write_logits ? state.step_logits().data_as<float>() : nullptr;
  p.best_token = best_token_.data_as<int32_t>();
  p.best_logprob = best_logprob_.data_as<float>();
  p.logsumexp = logsumexp_.data_as<float>();
  if (suppress_bits_.defined()) {
    p.suppress_bits = suppress_bits_.data_as<uint32_t>();
    keep.push_back(suppress_bits_);
  }
  p.cross_split_keys = options_.cross_split_keys;
  p.self_split_keys = options_.self_split_keys;
  p.prefetch = options_.prefetch;
  p.block_attention = options_.block_attention;
  p.split_barrier = options_.split_barrier;
  p.fuse_ffn = options_.fuse_ffn;
  p.fuse_self_out = options_.fuse_self_out;
  p.prefetch_kv_tiles = options_.prefetch_kv_tiles;
  p.logits_prefetch_layer = options_.logits_prefetch_layer;
  p.profile_mode = options_.profile_mode;
  return ext_.LaunchRaw(
      "PersistentDecoderStep",
      [p](const cuda::LaunchContext& ctx) {
        return static_cast<int>(cuda::LaunchPersistentDecoder(ctx, p));
      },
      std::move(keep),
      {batch_, p.n_layers, p.cross_f16, p.prefetch, p.cross_split_keys, p.self_split_keys,
       p.logits_prefetch_layer, p.logits != nullptr, p.suppress_bits != nullptr, p.profile_mode,
       p.block_attention, p.prefetch_kv_tiles, p.split_barrier, p.fuse_ffn, p.fuse_self_out});
}

}  // namespace waav::bench
