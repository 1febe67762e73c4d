// WhisperModel::CrossAttentionScores: the teacher-forced decoder pass that word alignment reads
// the alignment heads' cross-attention scores from (word_alignment.h), apart from the step
// and encoder paths of whisper_model.cc.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/status.h"

namespace waav::whisper {

absl::StatusOr<std::vector<float>> WhisperModel::CrossAttentionScores(
    absl::Span<const int32_t> tokens, absl::Span<const AttentionHead> heads, int n_positions,
    const DecoderState& encoded, std::vector<float>* next_token_probs, int probs_vocab) const {
  const int64_t t = static_cast<int64_t>(tokens.size()), d = dims_.d_model;
  if (encoded.batch_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CrossAttentionScores: a decoder state of batch 1 is needed, not ", encoded.batch_size()));
  }
  if (t <= 0 || t > dims_.n_text_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossAttentionScores: ", t, " tokens (1 to ", dims_.n_text_ctx, ")"));
  }
  if (n_positions <= 0 || n_positions > dims_.n_audio_ctx) {
    return absl::InvalidArgumentError(absl::StrCat("CrossAttentionScores: ", n_positions,
                                                   " encoder positions (1 to ", dims_.n_audio_ctx,
                                                   ")"));
  }
  if (heads.empty()) return absl::InvalidArgumentError("CrossAttentionScores: no heads");
  int last_layer = 0;
  for (const AttentionHead& h : heads) {
    if (h.layer < 0 || h.layer >= dims_.n_decoder_layers || h.head < 0 || h.head >= dims_.n_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("CrossAttentionScores: no head ", h.head, " in decoder layer ", h.layer,
                       " (", dims_.n_decoder_layers, " layers of ", dims_.n_heads, " heads)"));
    }
    last_layer = std::max(last_layer, h.layer);
  }
  if (next_token_probs != nullptr) {
    if (probs_vocab <= 0 || probs_vocab > dims_.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("CrossAttentionScores: probabilities over ",
                                                     probs_vocab, " of ", dims_.n_vocab,
                                                     " tokens"));
    }
    last_layer = dims_.n_decoder_layers - 1;
  }
  for (int32_t token : tokens) {
    if (token < 0 || token >= dims_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " is outside the vocabulary"));
    }
  }
  const int32_t zero = 0, length = static_cast<int32_t>(t);
  ASSIGN_OR_RETURN(const Tensor token_ids, Upload(backend_, {1, t}, DType::kI32, tokens.data()));
  ASSIGN_OR_RETURN(const Tensor positions, Upload(backend_, {1}, DType::kI32, &zero));
  ASSIGN_OR_RETURN(const Tensor lengths, Upload(backend_, {1}, DType::kI32, &length));
  ASSIGN_OR_RETURN(const Tensor x, backend_.Allocate({1, t, d}, DType::kF32));
  ASSIGN_OR_RETURN(const Tensor scratch, backend_.Allocate({1, t, d}, DType::kF32));
  // This pass's own self-attention keys/values: every layer writes all T rows before reading.
  ASSIGN_OR_RETURN(const Tensor self_k, backend_.Allocate({1, t, d}, DType::kF32));
  ASSIGN_OR_RETURN(const Tensor self_v, backend_.Allocate({1, t, d}, DType::kF32));
  ASSIGN_OR_RETURN(const Workspace ws, NewWorkspace(x.shape()));
  RETURN_IF_ERROR(backend_.Embed(token_ids, positions, token_embedding_, decoder_positions_, x));

  const int64_t head_dim = d / dims_.n_heads;
  std::vector<float> scores(heads.size() * static_cast<size_t>(t * n_positions));
  for (int i = 0; i <= last_layer; ++i) {
    const DecoderLayer& layer = decoder_layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(RunAttention(layer.self_attention, x, self_k, self_v, &positions, &lengths,
                                 /*causal=*/true, scratch, ws));
    const bool wanted = std::any_of(heads.begin(), heads.end(),
                                    [i](const AttentionHead& h) { return h.layer == i; });
    if (wanted) {
      // The cross-attention queries as RunAttention computes them, and the keys of the
      // positions that hold audio; the few heads' scores are small enough for the host.
      const AttentionWeights& w = layer.cross_attention;
      RETURN_IF_ERROR(backend_.LayerNorm(x, w.norm_gamma, w.norm_beta, 1e-5f, ws.h));
      RETURN_IF_ERROR(backend_.Linear(ws.h, w.q_w, &w.q_b, Activation::kNone, ws.q));
      ASSIGN_OR_RETURN(const std::vector<float> q, Download<float>(backend_, ws.q));
      ASSIGN_OR_RETURN(Tensor keys,
                       encoded.cross_k_[static_cast<size_t>(i)].Reshape({dims_.n_audio_ctx, d}));
      ASSIGN_OR_RETURN(keys, keys.Slice(0, n_positions));
      ASSIGN_OR_RETURN(const std::vector<float> k, DownloadFloats(backend_, keys));
      // Each head's keys transposed ([head_dim, positions]), so that a token row's scores are
      // head_dim passes over contiguous positions (vectorised) instead of a dot product per
      // position; every score still sums its head_dim products in the order e = 0, 1, ...
      std::vector<float> keys_t(static_cast<size_t>(head_dim * n_positions));
      for (size_t n = 0; n < heads.size(); ++n) {
        if (heads[n].layer != i) continue;
        const int64_t offset = heads[n].head * head_dim;
        for (int64_t col = 0; col < n_positions; ++col) {
          for (int64_t e = 0; e < head_dim; ++e) {
            keys_t[static_cast<size_t>(e * n_positions + col)] = k[col * d + offset + e];
          }
        }
        float* out = scores.data() + n * static_cast<size_t>(t * n_positions);
        for (int64_t row = 0; row < t; ++row) {
          const float* qr = q.data() + row * d + offset;
          float* dots = out + row * n_positions;
          std::fill(dots, dots + n_positions, 0.0f);
          for (int64_t e = 0; e < head_dim; ++e) {
            const float qe = qr[e];
            const float* ke = keys_t.data() + e * n_positions;
            for (int64_t col = 0; col < n_positions; ++col) dots[col] += qe * ke[col];
          }
          for (int64_t col = 0; col < n_positions; ++col) dots[col] *= attention_scale_;
        }
      }
    }
    if (i == last_layer && next_token_probs == nullptr) break;
    RETURN_IF_ERROR(RunAttention(layer.cross_attention, x, encoded.cross_k_[i], encoded.cross_v_[i],
                                 nullptr, nullptr, /*causal=*/false, scratch, ws));
    RETURN_IF_ERROR(RunFeedForward(layer.ffn, x, ws));
  }
  if (next_token_probs != nullptr) {
    RETURN_IF_ERROR(backend_.LayerNorm(x, decoder_norm_gamma_, decoder_norm_beta_, 1e-5f, x));
    ASSIGN_OR_RETURN(const Tensor rows, x.Reshape({t, d}));
    ASSIGN_OR_RETURN(const Tensor logits, backend_.Allocate({t, dims_.n_vocab}, DType::kF32));
    RETURN_IF_ERROR(backend_.Linear(rows, token_embedding_, nullptr, Activation::kNone, logits));
    ASSIGN_OR_RETURN(const std::vector<float> host, Download<float>(backend_, logits));
    next_token_probs->assign(static_cast<size_t>(t - 1), 0.0f);
    for (int64_t row = 0; row + 1 < t; ++row) {
      const int32_t next = tokens[static_cast<size_t>(row + 1)];
      if (next >= probs_vocab) continue;
      const float* l = host.data() + row * dims_.n_vocab;
      const float max = *std::max_element(l, l + probs_vocab);
      double sum = 0;
      for (int v = 0; v < probs_vocab; ++v) sum += std::exp(static_cast<double>(l[v] - max));
      (*next_token_probs)[static_cast<size_t>(row)] =
          static_cast<float>(std::exp(static_cast<double>(l[next] - max)) / sum);
    }
  }
  return scores;
}

}  // namespace waav::whisper
