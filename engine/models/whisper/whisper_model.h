// Whisper encoder-decoder, written once against the Backend interface.
//
// WhisperModel owns the weights (uploaded to the backend at load) and runs the two halves:
//   * Encode: log-mel windows [B, n_mels, 3000] -> per-layer cross-attention K/V for the decoder.
//   * Decode: tokens at given positions -> logits of the last position of each row, appending the
//     tokens' self-attention K/V to the row's cache.
// Decoding state lives in a DecoderState (one row per stream), so many streams can share one
// model; WhisperModel itself is immutable after Load() and safe to share between threads that
// use distinct DecoderStates on a backend that serialises kernel submission.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/graph_cache.h"

namespace waav::ct2 {
class ModelFile;
}

namespace waav::whisper {

// Hyper-parameters read from the model file (tiny.en: 80 mels, 384 wide, 6 heads, 4+4 layers).
struct WhisperDims {
  int n_mels = 80;
  int n_audio_ctx = 1500;  // encoder positions per 30 s window
  int n_text_ctx = 448;    // decoder positions
  int d_model = 384;
  int n_heads = 6;
  int n_encoder_layers = 4;
  int n_decoder_layers = 4;
  int n_vocab = 51864;
  int n_frames() const { return 2 * n_audio_ctx; }  // mel frames per window (stride-2 conv)
};

// Whether RunDecodeStep and RunEncoder replay captured graphs (Backend::BeginCapture).
enum class GraphUse {
  // On backends that capture and whose device is not the CPU. On the CPU a replay saves only the
  // dispatch (microseconds against milliseconds of kernels) while every graph keeps scratch of
  // its own, so the CPU stays eager.
  kAuto,
  kAlways,  // wherever the backend captures, the CPU too (tests)
  kNever,   // eager calls everywhere
};

// One head of a decoder layer's cross-attention (config.json "alignment_heads" lists the heads
// whose attention follows the audio, for word timestamps).
struct AttentionHead {
  int layer = 0;
  int head = 0;
};

// One row of WhisperModel::CrossAttentionScoresBatch: a teacher-forced token sequence against the
// window encoded into row `row` of the state, over its encoder positions [0, n_positions).
struct ScoresRequest {
  int row = 0;
  absl::Span<const int32_t> tokens;
  int n_positions = 0;
};

// Where a CrossAttentionScoresBatch call's time went on the calling thread (for profiles): until
// the pass and its scores were issued, then waiting for them to arrive on the host.
struct ScoresTimings {
  double issue_ms = 0, wait_ms = 0;
};

// Runs fn(0) .. fn(n − 1), possibly on several threads at once, returning when all are done
// (e.g. a ThreadPool's ParallelFor); for host work that is independent per row.
using ForEachFn = std::function<void(size_t n, const std::function<void(size_t)>& fn)>;

// The largest batch that WhisperModelOptions::step_choice's kAuto chooses in the step for: at 8
// rows the choice in the logits launch (its last block merging 8 rows) measured 0.7-1.2 us a
// token slower than the ops after it on an H100 (docs/benchmarks.md, "Summary: H100, session 26").
inline constexpr int kStepChoiceAutoRows = 4;

struct WhisperModelOptions {
  // Element type the large projection weights are kept in on the device. f32 doubles the memory
  // of the f16 file but lets the CPU backend use BLAS; f16 halves weight traffic and takes the
  // GPU backends' f16 paths (f16 tensor-core GEMMs, HalfGemm, the f16 planes and residual
  // epilogues; f32 weights there run TF32 GEMMs with conversions around them). Values are the
  // same either way (f16 -> f32 is exact). Unset (the default): kF32 on the CPU, kF16 on other
  // devices. (Until session 20 the default was kF32 everywhere, so waavd and `waav transcribe`
  // on a GPU ran the f32 paths that the benchmarks, with f16 weights, did not time.)
  std::optional<DType> weight_dtype = std::nullopt;
  // Element type of the token embedding, which is also the output projection (51864 x d_model,
  // the largest read of every decoder step). Default: kF16.
  DType embedding_dtype = DType::kF16;
  // Graph capture of the decoder step and the encoder. Default: kAuto.
  GraphUse graphs = GraphUse::kAuto;
  // Whether callers that encode several windows (the streaming scheduler) should encode them in
  // one batched pass: kAuto on backends whose device is not the CPU (see
  // WhisperModel::batches_encoder), kAlways / kNever everywhere. Default: kAuto.
  GraphUse batch_encoder = GraphUse::kAuto;
  // Whether DecodeStep runs as the backend's prepared decoder step (Backend::PrepareDecoderStep:
  // on CUDA one persistent kernel per step, Whisper tiny's shapes, up to 8 rows) for batches it
  // takes; larger batches, prompts (PrefillRows, Decode of several tokens) and the rest stay
  // on the op-by-op path. kAuto: where the backend offers it for this model's dims (never on the
  // CPU, which does not); kAlways: the same, but Load fails when the backend refuses (tests);
  // kNever: op by op everywhere (for comparisons). Its sums may run in another, varying, order:
  // logits equal the op-by-op ones to rounding, not bit for bit. Default: kAuto.
  GraphUse fused_decoder_step = GraphUse::kAuto;
  // Whether DecodeGreedyBatch's device choice (Backend::ArgmaxLogSumExp, then FeedChoices) is
  // made in the prepared step's own launches where it offers that for a batch
  // (PreparedDecoderStep::RunAndChoose: on CUDA the cluster step's logits launch), so that a
  // greedy token is one replay with no kernels after it. kAlways: wherever the step offers it;
  // kAuto: there, for batches of up to kStepChoiceAutoRows rows (where it was measured faster);
  // kNever: the ops after the step. The same tokens and maxima; the sums behind the
  // log-probabilities within a relative 1e-5 (PreparedDecoderStep::RunAndChoose). Default: kAuto
  // (H100: a greedy token 3.1-3.3 us cheaper at one row, 1.6-2.1 at four; docs/gpu.md).
  GraphUse step_choice = GraphUse::kAuto;
  // Where the backend supports Op::kLinearPlanes: every decoder layer's cross-attention K and V
  // projection stacked into one weight, so that an encoded window is projected into the caches
  // by one GEMM (Backend::LinearPlanes) instead of two per layer (the per-layer weights become
  // views of the stacked one). Values equal the per-layer Linear calls to the backend's
  // rounding. Default: true.
  bool stacked_cross_projection = true;
  // Encoder positions per window (whisper.cpp's audio_ctx): 0 (the default) takes the model's
  // (1500, 30 s); a smaller count encodes windows of 2x as many mel frames (20 ms a position)
  // with the first positions' embeddings, so that short audio costs less encoder work. Whisper
  // was trained on 30 s windows only: outputs differ from the full window's (measured by
  // bench/audio_ctx_study, docs/benchmarks.md). For every window of the model: see
  // short_windows for some windows only.
  int audio_ctx = 0;
  // Whether encoder buffers may hold fewer positions than the model's windows
  // (NewEncoderBuffers' `positions`): the streaming engine's partials encode a window of about
  // their audio's length. A decoder state then keeps each row's count of encoder positions and
  // its cross-attention reads only those keys (Attention's kv_lengths). The prepared decoder
  // step and the absorbed cross-attention read every key: a step of a state holding a short
  // window runs op by op over the K/V caches (DecoderState::holds_short_window(); a graph of
  // each path per state). kAuto: on the CPU, where every step is op by op anyway (on a GPU the
  // serving gain is not measured yet); kAlways: everywhere; kNever: off. Default: kAuto.
  GraphUse short_windows = GraphUse::kAuto;
  // Where the backend supports Op::kHalfActivations: the decoder states' cross-attention K/V
  // caches in f16 (the encoder's projection rounds its f32 results to nearest; attention widens
  // them to f32 as it reads), half the bytes that every decoder step reads, the largest read
  // from batch 8 up. Default: true.
  bool half_cross_cache = true;
  // The cross-attention of decoder steps on the op-by-op path (one token a row: the batches
  // above the fused step's rows, or every batch without it) with its key and value projections
  // absorbed: per head h, scores = (q_h·Wk_hᵀ)·E_jᵀ and the output c_h·Wv_hᵀ·Wo_hᵀ, where E is
  // the encoder output (the same for every layer) and c_h = Σ_j p_j E_j (Backend::
  // SharedKvAttention). The state then also keeps E, one [n_audio_ctx, d_model] matrix a row
  // (f16 with half_cross_cache), which each layer's step reads instead of that layer's K and V
  // caches: half the bytes of a large batch's biggest read, for H times the multiply-adds on
  // tensor cores. The cross query and output projections become one [H·d, d] and one [d, H·d]
  // GEMM (folded at load, in double, stored in the weights' dtype); key biases cancel in the
  // softmax and value biases fold into the output bias. Prompts (several tokens a row), the
  // fused step and word alignment keep the K/V caches, which the encoder still writes.
  // kAuto: where the backend has the op and f16 activations, and d_model is a multiple of 64 up
  // to Backend::kMaxSharedKvWidth; kAlways: wherever the backend has the op (the CPU too:
  // tests), else Load fails; kNever: the K/V caches everywhere. Logits equal the K/V form's to
  // rounding. Default: kAuto.
  GraphUse absorbed_cross_attention = GraphUse::kAuto;
  // With the absorbed cross-attention: the kept encoder output E as i8 with a scale per row and
  // channel (Backend::QuantizeChannels; the scale is the channel's largest magnitude in the
  // window / 127) instead of f16: half the bytes of the read that bounds a large batch's step.
  // A value is off by at most half its channel's step, ~0.4% of the channel's largest magnitude
  // (f16: ~0.05% of the value); the logits of random weights of tiny's shapes moved by ~2e-4
  // (relative L2) and real speech's transcripts stayed the same (absorbed_cross_test). The K/V
  // caches (prompts, the fused step, word alignment) are unchanged. On an H100 (session 29,
  // docs/benchmarks.md) the op-by-op step took 700.5 us at 256 rows against 765.7 over f16,
  // 359.2 against 381.7 at 64, but 290.2 against 281.0 at 16; serving not measured: off by
  // default. kAuto: where E
  // would be f16 and the backend has Op::kQuantizeChannels; kAlways: wherever the absorbed
  // cross-attention runs and the backend has the op (the CPU too: tests), else Load fails;
  // kNever: E stays f16 (or f32). Default: kNever.
  GraphUse quantized_cross_source = GraphUse::kNever;
  // Where the encoder runs its attention on f16 planes (Op::kHalfActivations and
  // Op::kLinearPlanes): the attention writes its output in f16 (into the block's normed-input
  // buffer, which the Q/K/V projection has read by then), and the output projection reads it as
  // it is. Both GEMM paths round that input to f16 anyway (HalfGemm as it loads, cuBLAS by a
  // conversion), so the values are the same; the f16 input takes the output projection to
  // cuBLAS with the residual accumulated (beta = 1), which large batches run several times
  // faster than HalfGemm (docs/benchmarks.md, session 20). false: an f32 output. Default: true.
  bool half_encoder_attention_output = true;
};

// The activation buffers a layer's calls use for a pass of one shape [B, T, d_model] (the FFN's
// hidden layer flat), made by WhisperModel::NewWorkspace.
struct LayerWorkspace {
  Tensor h, q, k, v, attended, hidden;
};

// Cross-attention keys/values of one encoded window per batch row, and the self-attention cache.
// Created by WhisperModel::NewDecoderState for a fixed batch size.
class DecoderState {
 public:
  int batch_size() const { return batch_size_; }

  // Device inputs and output of WhisperModel::DecodeStep (one token per row). The caller writes
  // the inputs (Backend::CopyFromHost, or kernels) before each step or graph replay and reads the
  // logits after it:
  //   step_tokens  i32 [B, 1]  the token of each row
  //   positions    i32 [B]     its position (where its K/V go in the self-attention cache)
  //   lengths      i32 [B]     positions + 1 (keys each row attends to)
  //   step_logits  f32 [B, n_vocab]
  const Tensor& step_tokens() const { return step_.tokens; }
  const Tensor& positions() const { return positions_; }
  const Tensor& lengths() const { return lengths_; }
  const Tensor& step_logits() const { return step_.logits; }

  // Per-layer caches: self-attention f32 [B, n_text_ctx, d_model], cross-attention
  // [B, n_audio_ctx, d_model] f32, or f16 (WhisperModelOptions::half_cross_cache). For
  // backend-specific steps (the CUDA fused decoder step).
  const Tensor& self_k(int layer) const { return self_k_[static_cast<size_t>(layer)]; }
  const Tensor& self_v(int layer) const { return self_v_[static_cast<size_t>(layer)]; }
  const Tensor& cross_k(int layer) const { return cross_k_[static_cast<size_t>(layer)]; }
  const Tensor& cross_v(int layer) const { return cross_v_[static_cast<size_t>(layer)]; }
  // The encoder output [B, n_audio_ctx, d_model] (the cross caches' dtype) where the model
  // absorbs the cross-attention projections (WhisperModelOptions::absorbed_cross_attention);
  // undefined otherwise.
  const Tensor& cross_source() const { return cross_source_; }
  // i32 [B]: the encoder positions each row's cross-attention reads, where the model takes short
  // windows (WhisperModelOptions::short_windows); nullptr otherwise (every position).
  const Tensor* cross_lengths() const {
    return cross_lengths_.defined() ? &cross_lengths_ : nullptr;
  }
  // cross_source()'s scales f32 [B, d_model] where it is i8 (quantized_cross_source), else
  // undefined.
  const Tensor& cross_source_scales() const { return cross_source_scales_; }

  // Rows [begin, end) of this state as a state of batch end − begin that shares its memory:
  // caches, step inputs, step activations and logits are views (Tensor::Slice), so creating one
  // allocates nothing on the device. A step on the view reads and writes only its rows; the
  // view keeps the memory alive. Used to run one row alone (encode into it, prefill its prompt)
  // and to step a prefix of the rows at a smaller batch size.
  absl::StatusOr<std::unique_ptr<DecoderState>> Rows(int begin, int end) const;
  // Whether a row holds a window shorter than the model's (as the last encoder pass into each
  // row left it; host-side, known as soon as the pass is issued): then its steps take the
  // op-by-op cross-attention over each row's own window (cross_lengths) even where the model
  // would run its prepared step or absorbed cross-attention.
  bool holds_short_window() const;

 private:
  friend class WhisperModel;
  // Activations of one step (T = 1), allocated with the state so that a step allocates nothing.
  struct StepBuffers {
    Tensor tokens, x, out, h, q, k, v, attended, hidden, logits;
    // f16 FFN input and hidden layer where the backend has f16 activations and LinearResidual
    // (undefined otherwise).
    Tensor ffn_h, ffn_hidden;
    // The absorbed cross-attention's query and output, f32 [B, 1, H·d_model] (undefined
    // without it).
    Tensor absorbed_q, absorbed_out;
  };
  int batch_size_ = 0;
  std::vector<Tensor> cross_k_, cross_v_;  // per layer [B, n_audio_ctx, d_model]
  std::vector<Tensor> self_k_, self_v_;    // per layer [B, n_text_ctx, d_model]
  Tensor cross_source_;                    // [B, n_audio_ctx, d_model] or undefined
  Tensor cross_source_scales_;             // [B, d_model] where cross_source_ is i8
  Tensor cross_lengths_;  // i32 [B]: encoder positions of each row's window (short windows)
  // Host: the encoder positions of each row's window, shared by every view of the state's rows
  // (this view's rows start at first_row_); null where the model takes no short windows.
  std::shared_ptr<std::vector<int>> window_positions_;
  int first_row_ = 0;
  int full_positions_ = 0;
  Tensor positions_;                       // i32 [B]: where the next tokens are written
  Tensor lengths_;                         // i32 [B]: positions + tokens in this call
  StepBuffers step_;
  // Graphs of WhisperModel::RunDecodeStep on this state (one per state: a pool's bucket or row
  // view), and of the cross-attention K/V projection of RunEncoder into it (per encoder buffers).
  GraphCache step_graph_{1};
  GraphCache choice_graphs_{2};  // RunDecodeStepAndChoose's (one per choice output buffer)
  // The same while the state holds a short window (the op-by-op path).
  GraphCache short_step_graph_{1};
  GraphCache short_choice_graphs_{2};
  // WhisperModel::ChoosesInStep's answer for this state, asked once (its tensors, and so the
  // answer, do not change; asking builds the step's whole DecoderStepIo).
  mutable std::optional<bool> chooses_in_step_;
  GraphCache cross_graphs_{8};  // whole windows and each short window's length
  // WhisperModel::PrefillRows' buffers for prompts padded to `tokens` a row, with the graph
  // captured on them; the kMaxPrefills lengths used last are kept.
  struct Prefill {
    int tokens = 0;
    uint64_t last_used = 0;
    Tensor token_ids, x, scratch;
    LayerWorkspace ws;
    GraphCache graph{1};
  };
  static constexpr size_t kMaxPrefills = 4;
  std::vector<std::unique_ptr<Prefill>> prefills_;
  uint64_t prefill_clock_ = 0;
  // WhisperModel's word-alignment pass with graphs (ScoresPass): its buffers for `rows` rows of
  // `tokens` padded tokens, the queries of the layers with an alignment head (`wanted`), and the
  // graph captured on them; the kMaxScoresBuffers shapes used last are kept. Mutable: the pass
  // takes the state as const (it writes none of the state's own tensors).
  struct ScoresBuffers {
    int rows = 0;
    int64_t tokens = 0;
    std::vector<bool> wanted;  // per decoder layer
    uint64_t last_used = 0;
    Tensor token_ids, positions, lengths, x, scratch, self_k, self_v;
    LayerWorkspace ws;
    std::vector<Tensor> q;  // per decoder layer, defined where wanted
    GraphCache graph{1};
  };
  static constexpr size_t kMaxScoresBuffers = 8;
  mutable std::vector<std::unique_ptr<ScoresBuffers>> scores_buffers_;
  mutable uint64_t scores_clock_ = 0;
};

// Device buffers of one encoder pass for a fixed batch size (input, activations), so that the
// encoder allocates nothing and can be captured into a graph. Created by
// WhisperModel::NewEncoderBuffers; large (conv1 alone is B x 3000 x d_model floats).
class EncoderBuffers {
 public:
  int batch_size() const { return batch_size_; }
  // Encoder positions of each window (n_audio_ctx, or fewer: WhisperModelOptions::short_windows);
  // a window is twice as many mel frames.
  int positions() const { return positions_; }
  // f32 [B, n_frames, n_mels]: log-mel windows, time-major (the transpose of the front end's
  // [n_mels, n_frames] per window); the caller writes it before each pass or replay.
  const Tensor& mel() const { return mel_; }
  // f32 [B, n_audio_ctx, d_model]: the encoder output after a pass.
  const Tensor& output() const { return x_; }

  // Rows [begin, end) of these buffers as buffers of batch end − begin that share their memory
  // (views, like DecoderState::Rows): a pass on the view encodes only its rows and allocates
  // nothing. The scheduler encodes a batch of n windows on a prefix of one set of buffers.
  absl::StatusOr<std::unique_ptr<EncoderBuffers>> Rows(int begin, int end) const;

 private:
  friend class WhisperModel;
  int batch_size_ = 0;
  int positions_ = 0;
  // i32 [B] of positions_: copied into a decoder state's cross lengths by the encoder pass.
  Tensor cross_lengths_;
  Tensor mel_, conv1_, x_, scratch_, h_, q_, k_, v_, attended_, hidden_;
  // f16 [B, n_audio_ctx, d_model] and flat f16 [B · n_audio_ctx · encoder FFN width]: the FFN's
  // normed input and hidden layer where the backend supports Op::kHalfActivations and
  // Op::kLinearResidual (undefined otherwise): the GEMMs read f16 without a conversion pass.
  Tensor ffn_h_, ffn_hidden_;
  // Flat f16 [B · 3 · n_audio_ctx · d_model]: Q, K and V as three planes [3, B · n_audio_ctx,
  // d_model] where, in addition, the backend supports Op::kLinearPlanes (the attention block's
  // normed input then goes to ffn_h_).
  Tensor qkv_;
  // f32 [n_frames, n_mels] of zeros: the padding UploadStagedMel copies after a window's audio.
  Tensor mel_zeros_;
  GraphCache graph_{1};  // WhisperModel::RunEncoder's encoder pass
};

class WhisperModel {
 public:
  // Reads `model_dir`/model.bin (CTranslate2 WhisperSpec) and uploads the weights to `backend`,
  // which must outlive the model. Errors name the file and the offending variable.
  static absl::StatusOr<std::unique_ptr<WhisperModel>> Load(const std::string& model_dir,
                                                            Backend& backend,
                                                            WhisperModelOptions options = {});
  static absl::StatusOr<std::unique_ptr<WhisperModel>> FromModelFile(const ct2::ModelFile& file,
                                                                     Backend& backend,
                                                                     WhisperModelOptions options);

  const WhisperDims& dims() const { return dims_; }
  Backend& backend() const { return backend_; }
  // Whether RunDecodeStep and RunEncoder replay graphs (WhisperModelOptions::graphs resolved
  // against this backend).
  bool uses_graphs() const { return use_graphs_; }
  // Whether one encoder pass over several windows is worth more than one pass per window on
  // this backend (WhisperModelOptions::batch_encoder resolved against it). On the CPU one
  // window's GEMMs (1500 rows) already fill the cores, a batch measured no faster per window and
  // its output differs from the one-window output in the last bits (docs/benchmarks.md), so
  // windows are encoded one at a time there; on a GPU a batch fills the chip.
  bool batches_encoder() const { return batch_encoder_; }
  // Rows up to which DecodeStep runs the backend's prepared decoder step
  // (WhisperModelOptions::fused_decoder_step resolved against the backend); 0: never.
  int fused_step_max_batch() const {
    return prepared_step_ == nullptr ? 0 : prepared_step_->max_batch();
  }
  // Whether NewEncoderBuffers takes fewer positions than n_audio_ctx
  // (WhisperModelOptions::short_windows resolved against the backend and the decoder's paths).
  bool takes_short_windows() const { return short_windows_; }

  absl::StatusOr<std::unique_ptr<DecoderState>> NewDecoderState(int batch_size) const;

  // Runs the encoder on `mel` (host, row-major [B, n_mels, n_frames]) and stores each layer's
  // cross-attention K/V in `state`, whose batch size must be B. Resets the self-attention cache.
  absl::Status Encode(absl::Span<const float> mel, DecoderState& state) const;

  // Buffers for windows of `positions` encoder positions (2x as many mel frames): 0 for the
  // model's n_audio_ctx; fewer where takes_short_windows() (the first positions' embeddings,
  // as WhisperModelOptions::audio_ctx; the state a pass writes into then attends to that many).
  absl::StatusOr<std::unique_ptr<EncoderBuffers>> NewEncoderBuffers(int batch_size,
                                                                    int positions = 0) const;

  // Runs the encoder on buffers.mel() into buffers.output() and, when `state` is given (of the
  // same batch size), stores each decoder layer's cross-attention K/V in it. Device only: it
  // allocates nothing, copies nothing to or from the host and does not wait, so it can be
  // captured into a graph like DecodeStep (the buffers and state must outlive the graph).
  absl::Status EncodeOnDevice(EncoderBuffers& buffers, DecoderState* state) const;

  // EncodeOnDevice through graphs where uses_graphs(): the encoder pass is captured once per
  // `buffers` and the cross-attention K/V projection once per (buffers, state) pair, each replayed
  // afterwards (the graphs live in `buffers` and `state`; a tensor reallocated under them makes
  // the next call capture again). Otherwise, or where the backend cannot capture, it calls
  // EncodeOnDevice. Device only and asynchronous, like EncodeOnDevice; do not call it while a
  // capture of your own is open.
  absl::Status RunEncoder(EncoderBuffers& buffers, DecoderState* state) const;

  // Writes one log-mel window into row `row` of buffers.mel() (time-major). `layout` says how
  // `mel` is laid out on the host: the front end's [n_mels, n_frames] (transposed here, in tiles)
  // or already time-major [n_frames, n_mels] (copied as it is: what the streaming scheduler
  // prepares, so that no transpose sits on its thread). Copies to the device; allocates nothing
  // there.
  enum class MelLayout { kMelMajor, kTimeMajor };
  absl::Status WriteMel(absl::Span<const float> mel, int row, EncoderBuffers& buffers,
                        MelLayout layout = MelLayout::kMelMajor) const;
  // WriteMel in two halves, for many windows at once: StageMel writes a window into row `row`
  // of `staging`, host memory from backend().AllocateHost laid out as an EncoderBuffers::mel()
  // (thread-safe for distinct rows: the windows of a pass are staged in parallel); the window
  // may hold fewer than n_frames frames ([n_mels, f] or [f, n_mels], its audio), and only those
  // are written. UploadStagedMel copies the first frames[i] frames of staging's row i into row i
  // of buffers.mel() for each of its buffers.batch_size() rows (uploads that need no staging by
  // the driver: pinned memory on a GPU) and zeroes the rest of the row on the device, as a
  // window's zero padding after its audio: a 30 s window is 960 KB, a streaming window's audio
  // often a fifth of it. Asynchronous: `staging` must stay unchanged until the backend's next
  // Synchronize().
  absl::Status StageMel(absl::Span<const float> mel, int row, HostBuffer& staging,
                        MelLayout layout = MelLayout::kMelMajor) const;
  absl::Status UploadStagedMel(const HostBuffer& staging, absl::Span<const int> frames,
                               EncoderBuffers& buffers) const;

  // Encoder output only (host [B, n_audio_ctx, d_model]); for tests and parity checks.
  absl::StatusOr<std::vector<float>> EncoderOutput(absl::Span<const float> mel, int batch) const;

  // Feeds tokens[b][0..T) at positions positions[b] .. positions[b] + T − 1 for every row b
  // (all rows the same T) and returns the logits of each row's last token, host [B, n_vocab].
  absl::StatusOr<std::vector<float>> Decode(absl::Span<const int32_t> tokens, int tokens_per_row,
                                            absl::Span<const int32_t> positions,
                                            DecoderState& state) const;

  // One token per row (tokens and positions of every row of `state`) through RunDecodeStep, then
  // the logits of rows [0, rows_out) copied into `logits` (resized to rows_out × n_vocab; pass
  // the same vector every step so that its memory is reused). Decode with one token per row is
  // this with rows_out = batch; a batch whose last rows are padding downloads fewer rows.
  absl::Status DecodeStepToHost(absl::Span<const int32_t> tokens,
                                absl::Span<const int32_t> positions, DecoderState& state,
                                int rows_out, std::vector<float>& logits) const;

  // Prompt prefill of every row of `state` in one pass: row b's tokens[b] (its own count, at
  // most n_text_ctx; empty rows are allowed) at positions 0, 1, ..., each row attending to its
  // own earlier tokens only, as Decode on that row alone would (the same values up to rounding:
  // GEMMs over more rows may take another path). Rows are padded to the longest with their last
  // token; the padding writes K/V past the row's tokens, where the row's next tokens are written
  // before anything attends to them. Returns the logits f32 [B, n_vocab] on the device of token
  // read_at[b] of each row b (−1: any row, meaningless), or an undefined tensor when read_at is
  // empty or all −1. Asynchronous. The rows are padded further, to a multiple of 8 tokens (at
  // most n_text_ctx); with graphs (uses_graphs()) the pass is captured once per padded length on
  // buffers the state keeps for it (DecoderState::Prefill; the 4 lengths used last), then
  // replayed: a prefill issues one graph instead of one launch per operation.
  absl::StatusOr<Tensor> PrefillRows(absl::Span<const std::vector<int32_t>> tokens,
                                     absl::Span<const int> read_at, DecoderState& state) const;

  // DecodeStepToHost without the download: inputs up and the step (RunDecodeStep); the logits
  // are left in state.step_logits() for the caller (asynchronous).
  absl::Status DecodeStepAsync(absl::Span<const int32_t> tokens,
                               absl::Span<const int32_t> positions, DecoderState& state) const;
  // DecodeStepAsync's first half: checks the tokens and positions (one each per row of `state`)
  // and copies them, with lengths = positions + 1, into the state's step inputs.
  absl::Status WriteStepInputs(absl::Span<const int32_t> tokens,
                               absl::Span<const int32_t> positions, DecoderState& state) const;

  // One decoder step on the device: reads state.step_tokens(), positions() and lengths() as they
  // are when the kernels run, appends each row's K/V to its self-attention cache and writes
  // state.step_logits(). Batches of up to fused_step_max_batch() rows run as the backend's
  // prepared step (one call), larger ones op by op. Allocates nothing, copies nothing to or from
  // the host and does not wait, so it can be recorded between Backend::BeginCapture() and
  // EndCapture() and the graph replayed for every later step (the state must outlive the graph).
  // Positions are not checked here: an out-of-range one is reported by the backend (see its
  // header).
  absl::Status DecodeStep(DecoderState& state) const;

  // DecodeStep through a graph where uses_graphs(): captured on the first step of `state` (each
  // bucket and row view of a DecoderStatePool is a state of its own, so one graph per batch-size
  // bucket) and replayed for every later step; the per-step values are read from the state's
  // tensors at replay. Otherwise, or where the backend cannot capture, it calls DecodeStep.
  // Decode with one token per row runs through it; prompts of several tokens stay eager.
  absl::Status RunDecodeStep(DecoderState& state) const;

  // A step and the greedy choice on the device (DecodeGreedyBatch): Backend::ArgmaxLogSumExp of
  // every row of the step's logits with `masks` (i32 [M, words]) and `mask_index` (i32 [B]; −1
  // leaves a row out) into `out` (f32 [B, 5]), then, where the backend has it, FeedChoices of
  // `out` into the state's step inputs (positions at most n_text_ctx − 1). Where the backend's
  // prepared step makes the choice itself (PreparedDecoderStep::ChoosesInStep), that one call:
  // no kernels after the step's. Through a graph where uses_graphs() (captured per state and
  // choice buffers, the last two kept: the buffers must keep their addresses, as a pool's do),
  // otherwise eager. Asynchronous.
  struct StepChoice {
    Tensor masks, mask_index, out;
  };
  absl::Status RunDecodeStepAndChoose(DecoderState& state, const StepChoice& choice) const;
  // Whether RunDecodeStepAndChoose on `state` makes the choice in the prepared step's launches
  // (WhisperModelOptions::step_choice and the step's offer).
  bool ChoosesInStep(const DecoderState& state) const;

  // A teacher-forced decoder pass over `tokens` (positions 0 .. T − 1) against the window encoded
  // into `encoded` (batch 1), returning the cross-attention scores before the softmax
  // (q·kᵀ × 1/√head_dim) of each of `heads` over encoder positions [0, n_positions): host
  // [heads.size(), T, n_positions]. Reads only the state's cross-attention K/V (its
  // self-attention cache and step buffers are left alone: the pass has its own), so it can run
  // on a finished row of a batch still decoding. Layers after the deepest head are skipped,
  // unless `next_token_probs` is given: then the whole decoder runs and it gets, for each
  // position i < T − 1, the probability of tokens[i + 1] under a softmax of position i's logits
  // over the tokens [0, probs_vocab) (T − 1 values; 0 for a token outside that range).
  absl::StatusOr<std::vector<float>> CrossAttentionScores(
      absl::Span<const int32_t> tokens, absl::Span<const AttentionHead> heads, int n_positions,
      const DecoderState& encoded, std::vector<float>* next_token_probs = nullptr,
      int probs_vocab = 0) const;
  // CrossAttentionScores for several rows of `encoded` in one decoder pass (rows 0 .. the
  // highest requested row, token sequences padded to the longest; the rows nobody asked for are
  // computed and dropped): element k is request k's [heads.size(), T_k, n_positions_k]. The same
  // arithmetic as one call per row, each row's in batched kernels (rounding may differ where a
  // backend's GEMM does with the row count). Rows distinct. Reads only the state's cross K/V.
  // The scores are computed where the pass runs (Backend::HeadScores: the same floats on every
  // backend for the same queries and keys) and downloaded once.
  absl::StatusOr<std::vector<std::vector<float>>> CrossAttentionScoresBatch(
      absl::Span<const ScoresRequest> requests, absl::Span<const AttentionHead> heads,
      const DecoderState& encoded, ScoresTimings* timings = nullptr) const;

 private:
  // Every tensor a decoder step on `state` reads or writes (the key of its graphs).
  std::vector<const Tensor*> StepTensors(const DecoderState& state) const;
  // The state's tensors as the backend's prepared step takes them.
  DecoderStepIo PreparedStepIo(const DecoderState& state) const;

  struct AttentionWeights {
    Tensor norm_gamma, norm_beta;
    Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
    // Self-attention where the backend supports Op::kLinearPlanes: the stacked [Q; K; V]
    // projection [3d, d] and its bias [3d] (q/k/v weights and biases are then views of these).
    Tensor qkv_w, qkv_b;
  };
  struct FeedForwardWeights {
    Tensor norm_gamma, norm_beta, in_w, in_b, out_w, out_b;
  };
  struct EncoderLayer {
    AttentionWeights self_attention;
    FeedForwardWeights ffn;
  };
  // The cross-attention's projections with K and V absorbed (absorbed_cross_attention): the
  // query [H·d, d] (row h·d + i: Σ_e Wk[h·64 + e][i] · Wq[h·64 + e][·]) and its bias, the output
  // [d, H·d] (column h·d + i: Σ_e Wo[·][h·64 + e] · Wv[h·64 + e][i]) and its bias (bo + Wo·bv).
  struct AbsorbedCrossWeights {
    Tensor q_w, q_b, out_w, out_b;
  };
  struct DecoderLayer {
    AttentionWeights self_attention;
    AttentionWeights cross_attention;
    FeedForwardWeights ffn;
    AbsorbedCrossWeights absorbed_cross;  // undefined without absorbed_cross_attention
  };

  WhisperModel(Backend& backend, WhisperDims dims) : backend_(backend), dims_(dims) {}

  // Intermediates of one attention or feed-forward block: h, q, k, v, attended shaped like its
  // input x [.., d_model]; hidden flat, rows of x times the widest feed-forward layer.
  using Workspace = LayerWorkspace;
  absl::StatusOr<Workspace> NewWorkspace(const Shape& x_shape) const;

  absl::Status RunAttention(const AttentionWeights& w, const Tensor& x, const Tensor& k_cache,
                            const Tensor& v_cache, const Tensor* positions, const Tensor* lengths,
                            bool causal, const Tensor& out, const Workspace& ws,
                            bool fuse_residual = false) const;
  // `fuse_residual`: x += projection through Backend::LinearResidual (one call) instead of
  // Linear + Add; the encoder sets it where the backend supports the op.
  absl::Status RunFeedForward(const FeedForwardWeights& w, const Tensor& x, const Workspace& ws,
                              bool fuse_residual = false) const;
  // The decoder over token_ids i32 [B, T] at state's positions()/lengths() (already written):
  // the final-normed activations [B, T, d_model] (eager, allocated per call).
  absl::StatusOr<Tensor> DecoderForward(const Tensor& token_ids, DecoderState& state) const;
  // DecoderForward's calls into given buffers (x, scratch [B, T, d_model] and a workspace of
  // that shape), allocating nothing: what the prefill's graphs capture.
  absl::Status DecoderForwardInto(const Tensor& token_ids, DecoderState& state, const Tensor& x,
                                  const Tensor& scratch, const Workspace& ws) const;
  // The state's prefill buffers for prompts padded to `tokens` a row, allocated on first use.
  absl::StatusOr<DecoderState::Prefill*> PrefillBuffers(int tokens, DecoderState& state) const;
  // Logits f32 [B, n_vocab] of x[b, index[b]] for each row b.
  absl::StatusOr<Tensor> LogitsAt(const Tensor& x, absl::Span<const int64_t> index) const;
  // The encoder pass of EncodeOnDevice (into buffers.output()) and its cross-attention K/V
  // projection into `state`.
  absl::Status EncoderPass(EncoderBuffers& buffers) const;
  absl::Status RunEncoderAttentionPlanes(const EncoderLayer& layer, const Tensor& x,
                                         const EncoderBuffers& buffers) const;
  absl::Status ProjectCross(const EncoderBuffers& buffers, DecoderState& state) const;
  absl::Status ProjectShortCross(const EncoderBuffers& buffers, DecoderState& state) const;
  // Records on the host which window the state's rows now hold (DecoderState::window_positions_).
  void NoteWindowPositions(const EncoderBuffers& buffers, DecoderState& state) const;
  // The checks of the alignment passes: `what` names the caller in errors. CheckScoresHeads
  // returns the deepest head's layer.
  absl::StatusOr<int> CheckScoresHeads(const char* what,
                                       absl::Span<const AttentionHead> heads) const;
  absl::Status CheckScoresInput(const char* what, absl::Span<const int32_t> tokens,
                                int n_positions) const;
  // The alignment pass's buffers (DecoderState::ScoresBuffers): allocated into `b` (positions
  // 0, lengths `tokens`), or kept beside `encoded` for its graph, and the pass's calls into them
  // (the queries of the wanted layers; with `whole`, every layer's output in b.x).
  using ScoresBuffers = DecoderState::ScoresBuffers;
  absl::Status NewScoresBuffers(int rows, int64_t tokens, const std::vector<bool>& wanted,
                                ScoresBuffers& b) const;
  absl::StatusOr<ScoresBuffers*> KeptScoresBuffers(const DecoderState& encoded, int rows,
                                                   int64_t tokens,
                                                   const std::vector<bool>& wanted) const;
  absl::Status ScoresForward(const ScoresBuffers& b, const DecoderState& state, int last_layer,
                             bool whole) const;
  // The pass behind CrossAttentionScores (one request) and CrossAttentionScoresBatch; with
  // `next_token_probs`, every layer and the logits too, one probability vector per request.
  absl::StatusOr<std::vector<std::vector<float>>> ScoresPass(
      const char* what, absl::Span<const ScoresRequest> requests,
      absl::Span<const AttentionHead> heads, const DecoderState& encoded,
      std::vector<std::vector<float>>* next_token_probs, int probs_vocab,
      ScoresTimings* timings = nullptr) const;
  // cross_kv_w_ / cross_kv_b_ from the decoder layers' loaded cross K/V weights (which become
  // views of them); nothing where 2 × layers exceeds Backend::kMaxLinearPlanes.
  absl::Status StackCrossProjections();
  // prepared_step_ from the loaded decoder weights where the backend offers it; `required`: an
  // error when it does not.
  absl::Status PrepareFusedStep(bool required);
  // Each decoder layer's absorbed_cross from its loaded cross-attention weights, where
  // WhisperModelOptions::absorbed_cross_attention takes it (absorbed_cross.cc); `required`
  // (kAlways): an error where the backend or d_model does not take it.
  absl::Status PrepareAbsorbedCross(bool required);
  // x += the absorbed cross-attention of decoder layer `layer` over state's cross_source(),
  // one token a row (LN, the folded query projection, SharedKvAttention, the folded output
  // projection with the residual).
  absl::Status RunAbsorbedCross(int layer, const Tensor& x, DecoderState& state,
                                const Workspace& ws, bool fuse_residual) const;
  // New buffers holding `mel` (host [B, n_mels, n_frames]) transposed to time-major.
  absl::StatusOr<std::unique_ptr<EncoderBuffers>> UploadMel(absl::Span<const float> mel,
                                                            int batch) const;

  Backend& backend_;
  WhisperDims dims_;
  bool use_graphs_ = false;
  GraphUse step_choice_ = GraphUse::kNever;  // WhisperModelOptions::step_choice
  bool batch_encoder_ = false;
  float attention_scale_ = 0.125f;
  Tensor conv1_w_, conv1_b_, conv2_w_, conv2_b_, encoder_positions_;
  Tensor encoder_norm_gamma_, encoder_norm_beta_;
  std::vector<EncoderLayer> encoder_layers_;
  Tensor token_embedding_, decoder_positions_;
  Tensor decoder_norm_gamma_, decoder_norm_beta_;
  std::vector<DecoderLayer> decoder_layers_;
  // WhisperModelOptions::stacked_cross_projection: [K0; V0; K1; V1; ...] [2 L d, d] and its
  // bias [2 L d], or undefined (one Linear per layer's K and V).
  Tensor cross_kv_w_, cross_kv_b_;
  // Element type of the decoder states' cross-attention K/V (WhisperModelOptions::
  // half_cross_cache).
  DType cross_dtype_ = DType::kF32;
  // The backend's one-call decoder step over these weights (WhisperModelOptions::
  // fused_decoder_step), or null.
  std::unique_ptr<PreparedDecoderStep> prepared_step_;
  // Whether decoder states keep the encoder output and op-by-op steps use absorbed_cross.
  bool absorbed_cross_ = false;
  bool short_windows_ = false;
  // The kept encoder output's element type (quantized_cross_source: i8 with scales).
  DType cross_source_dtype_ = DType::kF32;
  // WhisperModelOptions::half_encoder_attention_output (where the encoder runs on f16 planes).
  bool half_encoder_attention_ = true;
  // The word-alignment pass's host buffer for the scores it downloads (ScoresPass; from
  // Backend::AllocateHost, grown to a power of two as needed), and the lock that lets one pass at
  // a time use it: the model stays shareable between threads.
  mutable std::mutex scores_download_mu_;
  mutable HostBuffer scores_download_;
};

}  // namespace waav::whisper
