#include "kernels/cuda/persistent_step.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/cluster_decoder.cuh"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::cuda {
namespace {

// `src` (f32 or f16) into `dst` (f16, same element count): a copy, or a conversion on the device.
absl::Status ToHalf(Backend& backend, CudaExtensions& ext, const Tensor& src, const Tensor& dst) {
  if (src.dtype() == DType::kF16) return backend.Copy(src, dst);
  const int64_t n = src.numel();
  return ext.LaunchRaw(
      "PersistentDecoderStep: f32 -> f16 weights",
      [from = src.data_as<float>(), to = dst.data_as<__half>(), n](const LaunchContext& ctx) {
        return static_cast<int>(LaunchFloatToHalf(ctx, from, to, n));
      },
      {src, dst}, {n});
}

absl::StatusOr<Tensor> HalfCopy(Backend& backend, CudaExtensions& ext, const Tensor& src) {
  if (src.dtype() == DType::kF16) return src;  // used as it is
  ASSIGN_OR_RETURN(Tensor dst, backend.Allocate(src.shape(), DType::kF16));
  RETURN_IF_ERROR(ToHalf(backend, ext, src, dst));
  return dst;
}

}  // namespace

absl::Status CheckPersistentStepDims(const DecoderStepDims& d, int batch) {
  if (PersistentDecoderSupported(batch, d.n_layers, d.d_model, d.n_heads, d.ffn_dim)) {
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "the persistent decoder step takes d_model ", kPersistentDModel, ", ", kPersistentHeads,
      " heads, FFN ", kPersistentFfn, ", 1 to ", kPersistentMaxLayers, " layers, 1 to ",
      kPersistentMaxBatch, " rows (Whisper tiny); asked for d_model ", d.d_model, ", ", d.n_heads,
      " heads, FFN ", d.ffn_dim, ", ", d.n_layers, " layers, ", batch, " rows"));
}

int PersistentDecoderStep::max_batch() const { return max_batch_; }

absl::StatusOr<std::unique_ptr<PersistentDecoderStep>> PersistentDecoderStep::Create(
    Backend& backend, CudaExtensions& ext, const DecoderStepWeights& w,
    const PersistentStepTuning& tuning) {
  RETURN_IF_ERROR(CheckDecoderStepWeights(w));
  RETURN_IF_ERROR(CheckPersistentStepDims(w.dims));
  if (tuning.cross_split_keys < 1 || tuning.self_split_keys < 1) {
    return absl::InvalidArgumentError("persistent decoder step: split sizes must be >= 1");
  }
  // The rows the device runs the step for: the cooperative kernel's shared memory grows with the
  // rows' bucket (the cluster step runs only where all of them fit: a Hopper).
  int rows = 0;
  for (int b = 1; b <= kPersistentMaxBatch; ++b) {
    if (PersistentDecoderFits(b, ext.multiprocessor_count())) rows = b;
  }
  if (rows == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "persistent decoder step: its cooperative kernel needs more shared memory per block than "
        "this GPU allows (",
        MaxSharedBytesPerBlock(), " bytes)"));
  }
  auto step = std::unique_ptr<PersistentDecoderStep>(new PersistentDecoderStep(backend, ext));
  step->max_batch_ = rows;
  step->dims_ = w.dims;
  step->tuning_ = tuning;
  if (step->tuning_.logits_prefetch_layer == -2) {
    step->tuning_.logits_prefetch_layer = w.dims.n_layers - 1;
  }
  const int64_t d = w.dims.d_model;
  ASSIGN_OR_RETURN(step->token_embedding_, HalfCopy(backend, ext, w.token_embedding));
  step->positions_ = w.position_table;
  step->final_g_ = w.final_norm_gamma;
  step->final_b_ = w.final_norm_beta;
  for (const DecoderStepLayerWeights& l : w.layers) {
    Layer s;
    s.ln1_g = l.self_norm_gamma;
    s.ln1_b = l.self_norm_beta;
    // Q, K, V as one [3d, d] matrix and one [3d] bias: one GEMV for the three.
    ASSIGN_OR_RETURN(s.qkv_w, backend.Allocate({3 * d, d}, DType::kF16));
    ASSIGN_OR_RETURN(s.qkv_b, backend.Allocate({3 * d}, DType::kF32));
    const Tensor* parts[3][2] = {{&l.q_w, &l.q_b}, {&l.k_w, &l.k_b}, {&l.v_w, &l.v_b}};
    for (int64_t i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(const Tensor rows, s.qkv_w.Slice(i * d, (i + 1) * d));
      RETURN_IF_ERROR(ToHalf(backend, ext, *parts[i][0], rows));
      ASSIGN_OR_RETURN(const Tensor bias, s.qkv_b.Slice(i * d, (i + 1) * d));
      RETURN_IF_ERROR(backend.Copy(*parts[i][1], bias));
    }
    ASSIGN_OR_RETURN(s.out_w, HalfCopy(backend, ext, l.out_w));
    s.out_b = l.out_b;
    s.ln2_g = l.cross_norm_gamma;
    s.ln2_b = l.cross_norm_beta;
    ASSIGN_OR_RETURN(s.cq_w, HalfCopy(backend, ext, l.cross_q_w));
    s.cq_b = l.cross_q_b;
    ASSIGN_OR_RETURN(s.cout_w, HalfCopy(backend, ext, l.cross_out_w));
    s.cout_b = l.cross_out_b;
    s.ln3_g = l.ffn_norm_gamma;
    s.ln3_b = l.ffn_norm_beta;
    ASSIGN_OR_RETURN(s.ff1_w, HalfCopy(backend, ext, l.ff1_w));
    s.ff1_b = l.ff1_b;
    ASSIGN_OR_RETURN(s.ff2_w, HalfCopy(backend, ext, l.ff2_w));
    s.ff2_b = l.ff2_b;
    step->layers_.push_back(std::move(s));
  }
  // One workspace for every batch up to the largest (steps run one after another on the
  // backend's stream, graph replays included, so they can share it).
  size_t floats = 0;
  for (int b = 1; b <= kPersistentMaxBatch; ++b) {
    floats = std::max(floats, PersistentWorkspaceFloats(
                                  b, w.dims.n_source, w.dims.n_positions, tuning.cross_split_keys,
                                  tuning.self_split_keys, ext.multiprocessor_count()));
  }
  ASSIGN_OR_RETURN(step->workspace_, backend.Allocate({static_cast<int64_t>(floats)}, DType::kF32));
  const std::vector<int32_t> zeros(kPersistentSyncWords, 0);
  ASSIGN_OR_RETURN(step->sync_, Upload(backend, {kPersistentSyncWords}, DType::kI32, zeros.data()));
  RETURN_IF_ERROR(backend.Synchronize());
  return step;
}

absl::Status PersistentDecoderStep::Run(const DecoderStepIo& io) { return RunWith(io, {}); }

bool PersistentDecoderStep::ChoosesInStep(const DecoderStepIo& io) const {
  if (!io.positions.defined() || io.positions.rank() < 1 || io.cross_k.empty()) return false;
  PersistentDecoderParams p;
  p.batch = static_cast<int>(io.positions.dim(0));
  p.n_layers = dims_.n_layers;
  p.vocab = dims_.n_vocab;
  p.text_ctx = dims_.n_positions;
  p.audio_ctx = dims_.n_source;
  p.cross_f16 = io.cross_k[0].dtype() == DType::kF16;
  return tuning_.cluster && tuning_.choice_in_step && tuning_.profile_mode == 0 &&
         ClusterDecoderChooses(p, ext_.multiprocessor_count());
}

absl::Status PersistentDecoderStep::RunAndChoose(const DecoderStepIo& io,
                                                 const DecoderStepChoice& choice) {
  RETURN_IF_ERROR(CheckDecoderStepIo(dims_, max_batch(), io));
  const int64_t batch = io.positions.dim(0);
  ASSIGN_OR_RETURN(const Tensor logits, io.logits.Slice(0, batch));
  RETURN_IF_ERROR(checks::ValidateArgmaxLogSumExp(backend_.device(), logits, choice.masks,
                                                  choice.mask_index, choice.out)
                      .status());
  RETURN_IF_ERROR(checks::ValidateFeedChoices(backend_.device(), choice.out, choice.mask_index,
                                              choice.max_position, io.tokens, io.positions,
                                              io.lengths)
                      .status());
  if (!ChoosesInStep(io)) {
    return absl::UnimplementedError(absl::StrCat(
        "persistent decoder step: no greedy choice in the step for ", batch, " rows here"));
  }
  Extras extras;
  extras.choice = choice;
  return RunWith(io, extras);
}

absl::StatusOr<std::vector<int64_t>> PersistentDecoderStep::ReadTimeline() {
  const int64_t floats = 2 * kClusterTimelineStamps;
  ASSIGN_OR_RETURN(const Tensor tail,
                   workspace_.Slice(workspace_.numel() - floats, workspace_.numel()));
  RETURN_IF_ERROR(backend_.Synchronize());
  std::vector<int64_t> stamps(kClusterTimelineStamps);
  RETURN_IF_ERROR(backend_.CopyToHost(tail, stamps.data(), stamps.size() * sizeof(int64_t)));
  return stamps;
}

bool PersistentDecoderStep::UsesClusterStep(int batch, bool f16_cross) const {
  PersistentDecoderParams p;
  p.batch = batch;
  p.n_layers = dims_.n_layers;
  p.text_ctx = dims_.n_positions;
  p.audio_ctx = dims_.n_source;
  p.cross_f16 = f16_cross;
  return tuning_.cluster && ClusterDecoderAvailable(p);
}

absl::Status PersistentDecoderStep::RunWith(const DecoderStepIo& io, const Extras& extras) {
  RETURN_IF_ERROR(CheckDecoderStepIo(dims_, max_batch(), io));
  const int batch = static_cast<int>(io.positions.dim(0));
  for (const Tensor* t : {&extras.best_token, &extras.best_logprob, &extras.logsumexp}) {
    if (t->defined() && t->numel() < batch) {
      return absl::InvalidArgumentError(absl::StrCat("persistent decoder step: an output of ",
                                                     t->Describe(), " for ", batch, " rows"));
    }
  }
  if (extras.suppress_bits.defined() &&
      (extras.suppress_bits.dtype() != DType::kI32 ||
       extras.suppress_bits.numel() != (dims_.n_vocab + 31) / 32)) {
    return absl::InvalidArgumentError(absl::StrCat("persistent decoder step: suppress bits ",
                                                   extras.suppress_bits.Describe(), " for ",
                                                   dims_.n_vocab, " tokens"));
  }
  PersistentDecoderParams p;
  p.batch = batch;
  p.n_layers = dims_.n_layers;
  p.vocab = dims_.n_vocab;
  p.text_ctx = dims_.n_positions;
  p.audio_ctx = dims_.n_source;
  p.scale = dims_.attention_scale;
  p.eps = dims_.norm_eps;
  p.tokens = io.tokens.data_as<int32_t>();
  p.positions = io.positions.data_as<int32_t>();
  p.lengths = io.lengths.data_as<int32_t>();
  p.token_embedding = token_embedding_.data_as<__half>();
  p.position_table = positions_.data_as<float>();
  std::vector<Tensor> keep = {token_embedding_, positions_, final_g_,  final_b_,
                              workspace_,       sync_,      io.tokens, io.positions,
                              io.lengths,       io.logits};
  p.cross_f16 = io.cross_k[0].dtype() == DType::kF16;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    PersistentDecoderLayer& w = p.layers[i];
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
    if ((io.cross_k[i].dtype() == DType::kF16) != p.cross_f16) {
      return absl::InvalidArgumentError(
          "persistent decoder step: cross K/V of one element type in every layer");
    }
    p.self_k[i] = io.self_k[i].data_as<float>();
    p.self_v[i] = io.self_v[i].data_as<float>();
    p.cross_k[i] = io.cross_k[i].data();
    p.cross_v[i] = io.cross_v[i].data();
    for (const Tensor* t : {&io.self_k[i], &io.self_v[i], &io.cross_k[i], &io.cross_v[i]}) {
      keep.push_back(*t);
    }
  }
  p.final_g = final_g_.data_as<float>();
  p.final_b = final_b_.data_as<float>();
  p.workspace = workspace_.data_as<float>();
  p.workspace_floats = static_cast<size_t>(workspace_.numel());
  p.sync = sync_.data_as<unsigned>();
  p.logits = extras.write_logits ? io.logits.data_as<float>() : nullptr;
  for (const Tensor* t :
       {&extras.best_token, &extras.best_logprob, &extras.logsumexp, &extras.suppress_bits}) {
    if (t->defined()) keep.push_back(*t);
  }
  if (extras.best_token.defined()) p.best_token = extras.best_token.data_as<int32_t>();
  if (extras.best_logprob.defined()) p.best_logprob = extras.best_logprob.data_as<float>();
  if (extras.logsumexp.defined()) p.logsumexp = extras.logsumexp.data_as<float>();
  if (extras.suppress_bits.defined()) {
    p.suppress_bits = extras.suppress_bits.data_as<uint32_t>();
  }
  const DecoderStepChoice& choice = extras.choice;
  if (choice.out.defined()) {
    for (const Tensor* t : {&choice.masks, &choice.mask_index, &choice.out}) keep.push_back(*t);
    p.choice_masks = choice.masks.data_as<uint32_t>();
    p.choice_mask_words = static_cast<int>(choice.masks.dim(1));
    p.choice_num_masks = static_cast<int>(choice.masks.dim(0));
    p.choice_mask_index = choice.mask_index.data_as<int32_t>();
    p.choice_out = choice.out.data_as<float>();
    p.feed_tokens = io.tokens.data_as<int32_t>();
    p.feed_positions = io.positions.data_as<int32_t>();
    p.feed_lengths = io.lengths.data_as<int32_t>();
    p.feed_max_position = choice.max_position;
    p.logits = io.logits.data_as<float>();
  }
  const PersistentStepTuning& t = tuning_;
  p.cross_split_keys = t.cross_split_keys;
  p.self_split_keys = t.self_split_keys;
  p.prefetch = t.prefetch;
  p.block_attention = t.block_attention;
  p.split_barrier = t.split_barrier;
  p.fuse_ffn = t.fuse_ffn;
  p.fuse_self_out = t.fuse_self_out;
  p.prefetch_kv_tiles = t.prefetch_kv_tiles;
  p.logits_prefetch_layer = t.logits_prefetch_layer;
  p.profile_mode = t.profile_mode;
  p.cluster = t.cluster;
  p.l2_hints = t.l2_hints;
  p.logits_mma = t.logits_mma;
  p.logits_mma_wide = t.logits_mma_wide;
  p.logits_pace_ns = t.logits_pace_ns;
  p.cluster_norm_all_warps = t.cluster_norm_all_warps;
  p.cluster_half_partials = t.cluster_half_partials;
  p.cluster_balanced_cross = t.cluster_balanced_cross;
  p.cluster_mma_cross = t.cluster_mma_cross;
  p.cluster_scatter_merge = t.cluster_scatter_merge;
  p.cluster_staged_weights = t.cluster_staged_weights;
  return ext_.LaunchRaw(
      "PersistentDecoderStep",
      [p](const LaunchContext& ctx) { return static_cast<int>(LaunchPersistentDecoder(ctx, p)); },
      std::move(keep),
      {batch,
       p.n_layers,
       p.cross_f16,
       p.prefetch,
       p.cross_split_keys,
       p.self_split_keys,
       p.logits_prefetch_layer,
       p.logits != nullptr,
       p.suppress_bits != nullptr,
       p.best_token != nullptr,
       p.best_logprob != nullptr,
       p.logsumexp != nullptr,
       p.choice_out != nullptr,
       p.profile_mode,
       p.block_attention,
       p.prefetch_kv_tiles,
       p.split_barrier,
       p.fuse_ffn,
       p.fuse_self_out,
       p.cluster,
       p.l2_hints,
       p.logits_mma,
       p.logits_mma_wide,
       p.logits_pace_ns,
       p.cluster_norm_all_warps,
       p.cluster_half_partials,
       p.cluster_balanced_cross,
       p.cluster_mma_cross,
       p.cluster_scatter_merge,
       p.cluster_staged_weights});
}

}  // namespace waav::cuda
