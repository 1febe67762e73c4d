// WhisperModel::CrossAttentionScores: the teacher-forced decoder pass that word alignment reads
// the alignment heads' cross-attention scores from (word_alignment.h), apart from the step
// and encoder paths of whisper_model.cc.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/dtype.h"
#include "engine/runtime/status.h"

namespace waav::whisper {

absl::StatusOr<int> WhisperModel::CheckScoresHeads(const char* what,
                                                   absl::Span<const AttentionHead> heads) const {
  if (heads.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no heads"));
  int last_layer = 0;
  for (const AttentionHead& h : heads) {
    if (h.layer < 0 || h.layer >= dims_.n_decoder_layers || h.head < 0 || h.head >= dims_.n_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no head ", h.head, " in decoder layer ", h.layer, " (",
                       dims_.n_decoder_layers, " layers of ", dims_.n_heads, " heads)"));
    }
    last_layer = std::max(last_layer, h.layer);
  }
  return last_layer;
}

absl::Status WhisperModel::CheckScoresInput(const char* what, absl::Span<const int32_t> tokens,
                                            int n_positions) const {
  const int64_t t = static_cast<int64_t>(tokens.size());
  if (t <= 0 || t > dims_.n_text_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", t, " tokens (1 to ", dims_.n_text_ctx, ")"));
  }
  if (n_positions <= 0 || n_positions > dims_.n_audio_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", n_positions, " encoder positions (1 to ", dims_.n_audio_ctx, ")"));
  }
  for (int32_t token : tokens) {
    if (token < 0 || token >= dims_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", token, " is outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> WhisperModel::CrossAttentionScores(
    absl::Span<const int32_t> tokens, absl::Span<const AttentionHead> heads, int n_positions,
    const DecoderState& encoded, std::vector<float>* next_token_probs, int probs_vocab) const {
  if (encoded.batch_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CrossAttentionScores: a decoder state of batch 1 is needed, not ", encoded.batch_size()));
  }
  const ScoresRequest request{.row = 0, .tokens = tokens, .n_positions = n_positions};
  std::vector<std::vector<float>> probs;
  ASSIGN_OR_RETURN(std::vector<std::vector<float>> scores,
                   ScoresPass("CrossAttentionScores", {&request, 1}, heads, encoded,
                              next_token_probs != nullptr ? &probs : nullptr, probs_vocab));
  if (next_token_probs != nullptr) *next_token_probs = std::move(probs.front());
  return std::move(scores.front());
}

absl::StatusOr<std::vector<std::vector<float>>> WhisperModel::CrossAttentionScoresBatch(
    absl::Span<const ScoresRequest> requests, absl::Span<const AttentionHead> heads,
    const DecoderState& encoded, ScoresTimings* timings) const {
  return ScoresPass("CrossAttentionScoresBatch", requests, heads, encoded, nullptr, 0, timings);
}

absl::StatusOr<std::vector<std::vector<float>>> WhisperModel::ScoresPass(
    const char* what, absl::Span<const ScoresRequest> requests,
    absl::Span<const AttentionHead> heads, const DecoderState& encoded,
    std::vector<std::vector<float>>* next_token_probs, int probs_vocab,
    ScoresTimings* timings) const {
  const auto start = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  const char* const kWhat = what;
  const int64_t d = dims_.d_model;
  if (requests.empty()) return std::vector<std::vector<float>>{};
  ASSIGN_OR_RETURN(int last_layer, CheckScoresHeads(kWhat, heads));
  if (next_token_probs != nullptr) {
    if (probs_vocab <= 0 || probs_vocab > dims_.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, ": probabilities over ", probs_vocab,
                                                     " of ", dims_.n_vocab, " tokens"));
    }
    last_layer = dims_.n_decoder_layers - 1;
  }
  int rows = 0;
  int64_t t_max = 0;
  std::vector<bool> taken(static_cast<size_t>(encoded.batch_size()), false);
  for (const ScoresRequest& r : requests) {
    if (r.row < 0 || r.row >= encoded.batch_size() || taken[static_cast<size_t>(r.row)]) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, ": row ", r.row, " of a state of ",
                                                     encoded.batch_size(),
                                                     " rows (each row at most once)"));
    }
    taken[static_cast<size_t>(r.row)] = true;
    RETURN_IF_ERROR(CheckScoresInput(kWhat, r.tokens, r.n_positions));
    rows = std::max(rows, r.row + 1);
    t_max = std::max(t_max, static_cast<int64_t>(r.tokens.size()));
  }
  // With graphs (and no probabilities asked for), the pass runs in a few padded shapes, one
  // graph each, kept beside `encoded`: rows up to a power of two (those nobody asked for are
  // computed and dropped, as the rows below the highest are anyway), tokens up to a multiple of
  // 8 (causal attention: a real token never sees the padding after it). Eager, the shapes are
  // the requests' own.
  const bool graph = use_graphs_ && next_token_probs == nullptr;
  int64_t t_run = t_max;
  if (graph) {
    rows = std::min(static_cast<int>(std::bit_ceil(static_cast<unsigned>(rows))),
                    encoded.batch_size());
    t_run = std::min<int64_t>((t_max + 7) / 8 * 8, dims_.n_text_ctx);
  }
  ASSIGN_OR_RETURN(const std::unique_ptr<DecoderState> state, encoded.Rows(0, rows));
  // Each request's tokens at the start of its row; the padding (and the rows nobody asked for)
  // repeat a valid id.
  std::vector<int32_t> ids(static_cast<size_t>(rows * t_run), requests.front().tokens.front());
  for (const ScoresRequest& r : requests) {
    std::copy(r.tokens.begin(), r.tokens.end(), ids.begin() + r.row * t_run);
  }
  std::vector<bool> wanted(static_cast<size_t>(dims_.n_decoder_layers), false);
  for (const AttentionHead& h : heads) wanted[static_cast<size_t>(h.layer)] = true;
  const bool whole = next_token_probs != nullptr;
  ScoresBuffers eager;
  ScoresBuffers* buffers = &eager;
  if (graph) {
    ASSIGN_OR_RETURN(buffers, KeptScoresBuffers(encoded, rows, t_run, wanted));
    RETURN_IF_ERROR(backend_.CopyFromHost(ids.data(), ids.size() * 4, buffers->token_ids));
    const Tensor* keys[] = {&buffers->token_ids, &buffers->x, &state->cross_k_.front()};
    RETURN_IF_ERROR(buffers->graph.Run(backend_, /*use_graph=*/true, keys, [&] {
      return ScoresForward(*buffers, *state, last_layer, whole);
    }));
  } else {
    RETURN_IF_ERROR(NewScoresBuffers(rows, t_run, wanted, eager));
    RETURN_IF_ERROR(backend_.CopyFromHost(ids.data(), ids.size() * 4, eager.token_ids));
    RETURN_IF_ERROR(ScoresForward(eager, *state, last_layer, whole));
  }
  const Tensor& x = buffers->x;

  // Every request's scores in one device tensor, [heads.size(), T_k, n_k] from base[k] on,
  // written by HeadScores from each wanted layer's queries and downloaded once: the device never
  // waits for the host inside the pass, and the host scores nothing.
  const int64_t head_dim = d / dims_.n_heads;
  std::vector<int64_t> base(requests.size() + 1, 0);
  for (size_t k = 0; k < requests.size(); ++k) {
    base[k + 1] = base[k] + static_cast<int64_t>(heads.size()) *
                                static_cast<int64_t>(requests[k].tokens.size()) *
                                requests[k].n_positions;
  }
  ASSIGN_OR_RETURN(const Tensor device_scores, backend_.Allocate({base.back()}, DType::kF32));
  std::vector<HeadScoresItem> items;
  for (int i = 0; i <= last_layer; ++i) {
    items.clear();
    for (size_t k = 0; k < requests.size(); ++k) {
      const int64_t t = static_cast<int64_t>(requests[k].tokens.size()),
                    n = requests[k].n_positions;
      for (size_t h = 0; h < heads.size(); ++h) {
        if (heads[h].layer != i) continue;
        items.push_back({.row = requests[k].row,
                         .head = heads[h].head,
                         .queries = t,
                         .keys = n,
                         .offset = base[k] + static_cast<int64_t>(h) * t * n});
      }
    }
    if (items.empty()) continue;
    RETURN_IF_ERROR(backend_.HeadScores(buffers->q[static_cast<size_t>(i)],
                                        state->cross_k_[static_cast<size_t>(i)], head_dim,
                                        attention_scale_, items, device_scores));
  }
  if (next_token_probs != nullptr) {
    // Each request's position i < T − 1: the probability of its token i + 1 under a softmax
    // of position i's logits over [0, probs_vocab).
    RETURN_IF_ERROR(backend_.LayerNorm(x, decoder_norm_gamma_, decoder_norm_beta_, 1e-5f, x));
    ASSIGN_OR_RETURN(const Tensor flat, x.Reshape({rows * t_run, d}));
    ASSIGN_OR_RETURN(const Tensor logits,
                     backend_.Allocate({rows * t_run, dims_.n_vocab}, DType::kF32));
    RETURN_IF_ERROR(backend_.Linear(flat, token_embedding_, nullptr, Activation::kNone, logits));
    ASSIGN_OR_RETURN(const std::vector<float> host, Download<float>(backend_, logits));
    next_token_probs->assign(requests.size(), {});
    for (size_t k = 0; k < requests.size(); ++k) {
      const ScoresRequest& r = requests[k];
      const int64_t t = static_cast<int64_t>(r.tokens.size());
      std::vector<float>& probs = (*next_token_probs)[k];
      probs.assign(static_cast<size_t>(t - 1), 0.0f);
      for (int64_t pos = 0; pos + 1 < t; ++pos) {
        const int32_t next = r.tokens[static_cast<size_t>(pos + 1)];
        if (next >= probs_vocab) continue;
        const float* l = host.data() + (r.row * t_run + pos) * dims_.n_vocab;
        const float max = *std::max_element(l, l + probs_vocab);
        double sum = 0;
        for (int v = 0; v < probs_vocab; ++v) sum += std::exp(static_cast<double>(l[v] - max));
        probs[static_cast<size_t>(pos)] =
            static_cast<float>(std::exp(static_cast<double>(l[next] - max)) / sum);
      }
    }
  }
  // One download: through the pass's page-locked buffer (kept, so that page-locking it is paid
  // once, not per pass) up to kPinnedScoresBytes, larger passes straight into pageable memory.
  constexpr size_t kPinnedScoresBytes = size_t{64} << 20;
  std::vector<float> pageable;
  const float* all = nullptr;
  std::lock_guard<std::mutex> download_lock(scores_download_mu_);
  HostBuffer& download = scores_download_;
  const size_t bytes = device_scores.size_bytes();
  const auto download_start = std::chrono::steady_clock::now();
  if (timings != nullptr) timings->issue_ms = ms_since(start);
  if (bytes <= kPinnedScoresBytes) {
    if (download.size_bytes() < bytes) {
      download = HostBuffer();  // the old buffer is freed before the larger one is taken
      ASSIGN_OR_RETURN(download, backend_.AllocateHost(std::bit_ceil(bytes)));
    }
    RETURN_IF_ERROR(backend_.CopyToHost(device_scores, download.data(), bytes));
    all = download.data_as<const float>();
  } else {
    ASSIGN_OR_RETURN(pageable, Download<float>(backend_, device_scores));
    all = pageable.data();
  }
  if (timings != nullptr) timings->wait_ms = ms_since(download_start);
  std::vector<std::vector<float>> scores(requests.size());
  for (size_t k = 0; k < requests.size(); ++k) scores[k].assign(all + base[k], all + base[k + 1]);
  return scores;
}

absl::Status WhisperModel::NewScoresBuffers(int rows, int64_t tokens,
                                            const std::vector<bool>& wanted,
                                            ScoresBuffers& b) const {
  const int64_t d = dims_.d_model;
  b.rows = rows;
  b.tokens = tokens;
  b.wanted = wanted;
  const std::vector<int32_t> starts(static_cast<size_t>(rows), 0);
  const std::vector<int32_t> lengths(static_cast<size_t>(rows), static_cast<int32_t>(tokens));
  ASSIGN_OR_RETURN(b.token_ids, backend_.Allocate({rows, tokens}, DType::kI32));
  ASSIGN_OR_RETURN(b.positions, Upload(backend_, {rows}, DType::kI32, starts.data()));
  ASSIGN_OR_RETURN(b.lengths, Upload(backend_, {rows}, DType::kI32, lengths.data()));
  for (Tensor* t : {&b.x, &b.scratch, &b.self_k, &b.self_v}) {
    ASSIGN_OR_RETURN(*t, backend_.Allocate({rows, tokens, d}, DType::kF32));
  }
  ASSIGN_OR_RETURN(b.ws, NewWorkspace(b.x.shape()));
  b.q.resize(wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) {
      ASSIGN_OR_RETURN(b.q[i], backend_.Allocate({rows, tokens, d}, DType::kF32));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WhisperModel::ScoresBuffers*> WhisperModel::KeptScoresBuffers(
    const DecoderState& encoded, int rows, int64_t tokens, const std::vector<bool>& wanted) const {
  std::vector<std::unique_ptr<ScoresBuffers>>& kept = encoded.scores_buffers_;
  ++encoded.scores_clock_;
  for (const auto& b : kept) {
    if (b->rows == rows && b->tokens == tokens && b->wanted == wanted) {
      b->last_used = encoded.scores_clock_;
      return b.get();
    }
  }
  if (kept.size() >= DecoderState::kMaxScoresBuffers) {  // the least recently used shape goes
    kept.erase(std::min_element(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
      return a->last_used < b->last_used;
    }));
  }
  auto fresh = std::make_unique<ScoresBuffers>();
  RETURN_IF_ERROR(NewScoresBuffers(rows, tokens, wanted, *fresh));
  fresh->last_used = encoded.scores_clock_;
  kept.push_back(std::move(fresh));
  return kept.back().get();
}

absl::Status WhisperModel::ScoresForward(const ScoresBuffers& b, const DecoderState& state,
                                         int last_layer, bool whole) const {
  RETURN_IF_ERROR(
      backend_.Embed(b.token_ids, b.positions, token_embedding_, decoder_positions_, b.x));
  for (int i = 0; i <= last_layer; ++i) {
    const DecoderLayer& layer = decoder_layers_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(RunAttention(layer.self_attention, b.x, b.self_k, b.self_v, &b.positions,
                                 &b.lengths, /*causal=*/true, b.scratch, b.ws));
    if (b.wanted[static_cast<size_t>(i)]) {
      const AttentionWeights& w = layer.cross_attention;
      RETURN_IF_ERROR(backend_.LayerNorm(b.x, w.norm_gamma, w.norm_beta, 1e-5f, b.ws.h));
      RETURN_IF_ERROR(
          backend_.Linear(b.ws.h, w.q_w, &w.q_b, Activation::kNone, b.q[static_cast<size_t>(i)]));
    }
    if (i == last_layer && !whole) break;
    RETURN_IF_ERROR(RunAttention(layer.cross_attention, b.x, state.cross_k_[static_cast<size_t>(i)],
                                 state.cross_v_[static_cast<size_t>(i)], nullptr,
                                 state.cross_lengths(), /*causal=*/false, b.scratch, b.ws));
    RETURN_IF_ERROR(RunFeedForward(layer.ffn, b.x, b.ws));
  }
  return absl::OkStatus();
}

}  // namespace waav::whisper
