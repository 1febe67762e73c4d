// WhisperModel's encoder: its buffers, the mel upload, the encoder pass (convolutions, then
// the transformer layers, on the backend's fused ops where it offers them) and the
// cross-attention K/V projection into a decoder state.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/status.h"
#include "engine/runtime/transpose.h"

namespace waav::whisper {

absl::StatusOr<std::unique_ptr<EncoderBuffers>> WhisperModel::NewEncoderBuffers(
    int batch_size, int positions) const {
  if (batch_size <= 0) return absl::InvalidArgumentError("batch size must be positive");
  if (positions == 0) positions = dims_.n_audio_ctx;
  if (positions < 1 || positions > dims_.n_audio_ctx ||
      (positions < dims_.n_audio_ctx && !short_windows_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoder buffers of ", positions, " positions: this model takes ",
                     short_windows_ ? absl::StrCat("1 to ", dims_.n_audio_ctx)
                                    : absl::StrCat(dims_.n_audio_ctx, " (no short windows)")));
  }
  const int64_t b = batch_size, d = dims_.d_model, frames = 2 * int64_t{positions};
  auto buffers = std::make_unique<EncoderBuffers>();
  buffers->batch_size_ = batch_size;
  buffers->positions_ = positions;
  if (short_windows_) {
    const std::vector<int32_t> lengths(static_cast<size_t>(b), positions);
    ASSIGN_OR_RETURN(buffers->cross_lengths_, backend_.Allocate({b}, DType::kI32));
    RETURN_IF_ERROR(backend_.CopyFromHost(lengths.data(), lengths.size() * sizeof(int32_t),
                                          buffers->cross_lengths_));
  }
  ASSIGN_OR_RETURN(buffers->mel_, backend_.Allocate({b, frames, dims_.n_mels}, DType::kF32));
  ASSIGN_OR_RETURN(buffers->conv1_, backend_.Allocate({b, frames, d}, DType::kF32));
  ASSIGN_OR_RETURN(buffers->x_, backend_.Allocate({b, positions, d}, DType::kF32));
  ASSIGN_OR_RETURN(buffers->scratch_, backend_.Allocate(buffers->x_.shape(), DType::kF32));
  ASSIGN_OR_RETURN(buffers->mel_zeros_, backend_.Allocate({frames, dims_.n_mels}, DType::kF32));
  const std::vector<float> zeros(static_cast<size_t>(buffers->mel_zeros_.numel()), 0.0f);
  RETURN_IF_ERROR(
      backend_.CopyFromHost(zeros.data(), zeros.size() * sizeof(float), buffers->mel_zeros_));
  ASSIGN_OR_RETURN(const Workspace ws, NewWorkspace(buffers->x_.shape()));
  buffers->h_ = ws.h;
  buffers->q_ = ws.q;
  buffers->k_ = ws.k;
  buffers->v_ = ws.v;
  buffers->attended_ = ws.attended;
  buffers->hidden_ = ws.hidden;
  if (backend_.supports(Op::kHalfActivations) && backend_.supports(Op::kLinearResidual) &&
      !encoder_layers_.empty()) {
    const int64_t rows = b * positions;
    ASSIGN_OR_RETURN(buffers->ffn_h_, backend_.Allocate(buffers->x_.shape(), DType::kF16));
    ASSIGN_OR_RETURN(
        buffers->ffn_hidden_,
        backend_.Allocate({rows * encoder_layers_.front().ffn.in_w.dim(0)}, DType::kF16));
    if (encoder_layers_.front().self_attention.qkv_w.defined()) {
      ASSIGN_OR_RETURN(buffers->qkv_, backend_.Allocate({3 * rows * d}, DType::kF16));
    }
  }
  return buffers;
}

absl::StatusOr<std::unique_ptr<EncoderBuffers>> EncoderBuffers::Rows(int begin, int end) const {
  if (begin < 0 || end > batch_size_ || begin >= end) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", begin, ", ", end, ") of encoder buffers of batch ", batch_size_));
  }
  auto view = std::make_unique<EncoderBuffers>();
  view->batch_size_ = end - begin;
  view->positions_ = positions_;
  view->mel_zeros_ = mel_zeros_;
  if (cross_lengths_.defined()) {
    ASSIGN_OR_RETURN(view->cross_lengths_, cross_lengths_.Slice(begin, end));
  }
  // Batch-first, except `hidden`, which is flat and sliced by its per-row share.
  const std::pair<const Tensor*, Tensor*> batch_first[] = {{&mel_, &view->mel_},
                                                           {&conv1_, &view->conv1_},
                                                           {&x_, &view->x_},
                                                           {&scratch_, &view->scratch_},
                                                           {&h_, &view->h_},
                                                           {&q_, &view->q_},
                                                           {&k_, &view->k_},
                                                           {&v_, &view->v_},
                                                           {&attended_, &view->attended_}};
  for (const auto& [src, dst] : batch_first) {
    ASSIGN_OR_RETURN(*dst, src->Slice(begin, end));
  }
  const int64_t hidden_per_row = hidden_.numel() / batch_size_;
  ASSIGN_OR_RETURN(view->hidden_, hidden_.Slice(begin * hidden_per_row, end * hidden_per_row));
  if (ffn_h_.defined()) {
    ASSIGN_OR_RETURN(view->ffn_h_, ffn_h_.Slice(begin, end));
    const int64_t ffn_per_row = ffn_hidden_.numel() / batch_size_;
    ASSIGN_OR_RETURN(view->ffn_hidden_, ffn_hidden_.Slice(begin * ffn_per_row, end * ffn_per_row));
  }
  if (qkv_.defined()) {  // flat: each pass lays its own rows out as [3, rows, d_model]
    const int64_t qkv_per_row = qkv_.numel() / batch_size_;
    ASSIGN_OR_RETURN(view->qkv_, qkv_.Slice(begin * qkv_per_row, end * qkv_per_row));
  }
  return view;
}

absl::StatusOr<std::unique_ptr<EncoderBuffers>> WhisperModel::UploadMel(absl::Span<const float> mel,
                                                                        int batch) const {
  const int64_t b = batch, frames = dims_.n_frames(), mels = dims_.n_mels;
  if (batch <= 0 || static_cast<int64_t>(mel.size()) != b * mels * frames) {
    return absl::InvalidArgumentError(absl::StrCat(
        "encoder input has ", mel.size(), " values; expected ", b, " x ", mels, " x ", frames));
  }
  // The convolutions run time-major; the front end produces [mels, frames].
  std::vector<float> time_major(mel.size());
  for (int64_t i = 0; i < b; ++i) {
    const float* src = mel.data() + i * mels * frames;
    float* dst = time_major.data() + i * mels * frames;
    for (int64_t m = 0; m < mels; ++m)
      for (int64_t t = 0; t < frames; ++t) dst[t * mels + m] = src[m * frames + t];
  }
  ASSIGN_OR_RETURN(std::unique_ptr<EncoderBuffers> buffers, NewEncoderBuffers(batch));
  RETURN_IF_ERROR(
      backend_.CopyFromHost(time_major.data(), time_major.size() * sizeof(float), buffers->mel_));
  return buffers;
}

absl::Status WhisperModel::WriteMel(absl::Span<const float> mel, int row, EncoderBuffers& buffers,
                                    MelLayout layout) const {
  const int64_t frames = 2 * int64_t{buffers.positions()}, mels = dims_.n_mels;
  if (static_cast<int64_t>(mel.size()) != mels * frames) {
    return absl::InvalidArgumentError(
        absl::StrCat("log-mel window has ", mel.size(), " values; expected ", mels, " x ", frames));
  }
  if (row < 0 || row >= buffers.batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("row ", row, " of encoder buffers for batch ", buffers.batch_size()));
  }
  ASSIGN_OR_RETURN(const Tensor dst, buffers.mel_.Slice(row, row + 1));
  if (layout == MelLayout::kTimeMajor) {
    return backend_.CopyFromHost(mel.data(), mel.size() * sizeof(float), dst);
  }
  std::vector<float> time_major(mel.size());
  TransposeTiled(mel.data(), mels, frames, time_major.data());
  return backend_.CopyFromHost(time_major.data(), time_major.size() * sizeof(float), dst);
}

absl::Status WhisperModel::StageMel(absl::Span<const float> mel, int row, HostBuffer& staging,
                                    MelLayout layout) const {
  const int64_t frames = dims_.n_frames(), mels = dims_.n_mels;
  const size_t window = static_cast<size_t>(mels * frames);
  if (mel.size() > window || mel.size() % static_cast<size_t>(mels) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("log-mel window has ", mel.size(),
                                                   " values; expected ", mels, " x at most ",
                                                   frames, " frames"));
  }
  const int64_t given = static_cast<int64_t>(mel.size()) / mels;  // frames with audio
  const size_t rows = staging.size_bytes() / (window * sizeof(float));
  if (row < 0 || static_cast<size_t>(row) >= rows) {
    return absl::InvalidArgumentError(absl::StrCat("row ", row, " of a staging buffer of ",
                                                   staging.size_bytes(), " bytes (", rows,
                                                   " windows)"));
  }
  float* dst = staging.data_as<float>() + static_cast<size_t>(row) * window;
  if (layout == MelLayout::kTimeMajor) {
    std::memcpy(dst, mel.data(), mel.size() * sizeof(float));
  } else {
    TransposeTiled(mel.data(), mels, given, given, dst, mels);
  }
  return absl::OkStatus();  // (the padding: zeroed on the device by UploadStagedMel)
}

absl::Status WhisperModel::UploadStagedMel(const HostBuffer& staging, absl::Span<const int> frames,
                                           EncoderBuffers& buffers) const {
  // Staging rows are whole windows of the model (StageMel); the buffers' windows may be shorter.
  const int64_t n_frames = 2 * int64_t{buffers.positions()}, mels = dims_.n_mels;
  const int64_t rows = buffers.batch_size();
  if (static_cast<int64_t>(frames.size()) != rows) {
    return absl::InvalidArgumentError(absl::StrCat("UploadStagedMel: ", frames.size(),
                                                   " frame counts for encoder buffers of ", rows,
                                                   " rows"));
  }
  const size_t window_bytes = static_cast<size_t>(dims_.n_frames() * mels) * sizeof(float);
  if (staging.size_bytes() < static_cast<size_t>(rows) * window_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("UploadStagedMel: a staging buffer of ",
                                                   staging.size_bytes(), " bytes for ", rows,
                                                   " windows of ", window_bytes));
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t f = frames[static_cast<size_t>(i)];
    if (f < 0 || f > n_frames) {
      return absl::InvalidArgumentError(absl::StrCat(
          "UploadStagedMel: row ", i, " has ", f, " frames; these windows hold 0 to ", n_frames));
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t f = frames[static_cast<size_t>(i)];
    ASSIGN_OR_RETURN(Tensor row, buffers.mel_.Slice(i, i + 1));
    ASSIGN_OR_RETURN(row, row.Reshape({n_frames, mels}));
    if (f > 0) {
      ASSIGN_OR_RETURN(const Tensor audio, row.Slice(0, f));
      RETURN_IF_ERROR(backend_.CopyFromHostAsync(staging, audio.size_bytes(), audio,
                                                 static_cast<size_t>(i) * window_bytes));
    }
    if (f < n_frames) {
      ASSIGN_OR_RETURN(const Tensor padding, row.Slice(f, n_frames));
      ASSIGN_OR_RETURN(const Tensor zeros, buffers.mel_zeros_.Slice(f, n_frames));
      RETURN_IF_ERROR(backend_.Copy(zeros, padding));
    }
  }
  return absl::OkStatus();
}

namespace {

// The encoder pass and the cross K/V projections: every kernel fills the device and waits for
// the previous one, so they launch as such (Backend::LaunchHint; on CUDA optionally without
// PDL) until the scope ends.
class LargeKernels {
 public:
  explicit LargeKernels(Backend& backend) : backend_(backend) {
    backend_.SetLaunchHint(Backend::LaunchHint::kLargeKernels);
  }
  LargeKernels(const LargeKernels&) = delete;
  LargeKernels& operator=(const LargeKernels&) = delete;
  ~LargeKernels() { backend_.SetLaunchHint(Backend::LaunchHint::kDefault); }

 private:
  Backend& backend_;
};

}  // namespace

absl::Status WhisperModel::EncodeOnDevice(EncoderBuffers& buffers, DecoderState* state) const {
  if (state != nullptr && state->batch_size() != buffers.batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeOnDevice: encoder buffers for batch ", buffers.batch_size(),
                     " and a decoder state for batch ", state->batch_size()));
  }
  RETURN_IF_ERROR(EncoderPass(buffers));
  if (state == nullptr) return absl::OkStatus();
  NoteWindowPositions(buffers, *state);
  return ProjectCross(buffers, *state);
}

void WhisperModel::NoteWindowPositions(const EncoderBuffers& buffers, DecoderState& state) const {
  // Host-side, so never inside a graph: a replay would not run it.
  if (state.window_positions_ == nullptr) return;
  std::fill_n(state.window_positions_->begin() + state.first_row_, state.batch_size(),
              buffers.positions());
}

absl::Status WhisperModel::RunEncoder(EncoderBuffers& buffers, DecoderState* state) const {
  if (state != nullptr && state->batch_size() != buffers.batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunEncoder: encoder buffers for batch ", buffers.batch_size(),
                     " and a decoder state for batch ", state->batch_size()));
  }
  const EncoderBuffers& b = buffers;
  const Tensor* pass[] = {&b.mel_,   &b.conv1_,      &b.x_,  &b.scratch_,  &b.h_,
                          &b.q_,     &b.k_,          &b.v_,  &b.attended_, &b.hidden_,
                          &b.ffn_h_, &b.ffn_hidden_, &b.qkv_};
  RETURN_IF_ERROR(
      buffers.graph_.Run(backend_, use_graphs_, pass, [&] { return EncoderPass(buffers); }));
  if (state == nullptr) return absl::OkStatus();
  NoteWindowPositions(buffers, *state);
  std::vector<const Tensor*> cross = {&b.x_, &b.cross_lengths_, &state->cross_source_,
                                      &state->cross_source_scales_, &state->cross_lengths_};
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    cross.push_back(&state->cross_k_[static_cast<size_t>(i)]);
    cross.push_back(&state->cross_v_[static_cast<size_t>(i)]);
  }
  return state->cross_graphs_.Run(backend_, use_graphs_, cross,
                                  [&] { return ProjectCross(buffers, *state); });
}

absl::Status WhisperModel::EncoderPass(EncoderBuffers& buffers) const {
  const LargeKernels large_kernels(backend_);
  const Tensor& x = buffers.x_;
  RETURN_IF_ERROR(
      backend_.Conv1d(buffers.mel_, conv1_w_, conv1_b_, 1, 1, Activation::kGelu, buffers.conv1_));
  RETURN_IF_ERROR(backend_.Conv1d(buffers.conv1_, conv2_w_, conv2_b_, 2, 1, Activation::kGelu, x));
  Tensor positions = encoder_positions_;  // every window's positions (a short one's first ones)
  if (buffers.positions() < dims_.n_audio_ctx) {
    ASSIGN_OR_RETURN(positions, encoder_positions_.Slice(0, buffers.positions()));
  }
  RETURN_IF_ERROR(backend_.Add(x, positions, x));
  const Workspace ws{buffers.h_, buffers.q_,        buffers.k_,
                     buffers.v_, buffers.attended_, buffers.hidden_};
  // The residual additions go into the projections' epilogues where the backend can fuse them.
  const bool fuse = backend_.supports(Op::kLinearResidual);
  // The FFN's normed input and hidden layer in f16 where the backend takes f16 activations
  // (buffers made by NewEncoderBuffers; they need the fused residual: h is not an Add operand).
  Workspace ffn_ws = ws;
  if (buffers.ffn_h_.defined()) {
    ffn_ws.h = buffers.ffn_h_;
    ffn_ws.hidden = buffers.ffn_hidden_;
  }
  for (const EncoderLayer& layer : encoder_layers_) {
    if (buffers.qkv_.defined() && layer.self_attention.qkv_w.defined()) {
      RETURN_IF_ERROR(RunEncoderAttentionPlanes(layer, x, buffers));
    } else {
      RETURN_IF_ERROR(RunAttention(layer.self_attention, x, Tensor(), Tensor(), nullptr, nullptr,
                                   /*causal=*/false, buffers.scratch_, ws, fuse));
    }
    RETURN_IF_ERROR(RunFeedForward(layer.ffn, x, ffn_ws, fuse));
  }
  return backend_.LayerNorm(x, encoder_norm_gamma_, encoder_norm_beta_, 1e-5f, x);
}

// The encoder's attention block with f16 activations (Op::kHalfActivations) and one GEMM for
// Q, K and V (Op::kLinearPlanes): LayerNorm writes f16, the stacked projection writes f16 planes
// that Attention reads as they are, the output projection adds the residual (kLinearResidual).
absl::Status WhisperModel::RunEncoderAttentionPlanes(const EncoderLayer& layer, const Tensor& x,
                                                     const EncoderBuffers& buffers) const {
  const AttentionWeights& w = layer.self_attention;
  const Shape shape = x.shape();
  const int64_t rows = x.numel() / dims_.d_model;
  const Tensor& h = buffers.ffn_h_;
  RETURN_IF_ERROR(backend_.LayerNorm(x, w.norm_gamma, w.norm_beta, 1e-5f, h));
  ASSIGN_OR_RETURN(const Tensor h2, h.Reshape({rows, dims_.d_model}));
  ASSIGN_OR_RETURN(const Tensor qkv, buffers.qkv_.Reshape({3, rows, dims_.d_model}));
  Tensor planes[3];
  for (int64_t p = 0; p < 3; ++p) {
    ASSIGN_OR_RETURN(const Tensor plane, qkv.Slice(p, p + 1));
    ASSIGN_OR_RETURN(planes[p], plane.Reshape(shape));
  }
  RETURN_IF_ERROR(
      backend_.LinearPlanes(h2, layer.self_attention.qkv_w, &layer.self_attention.qkv_b, planes));
  // The attention's output in f16 goes into h (read by the projection above, free now).
  const Tensor& attended = half_encoder_attention_ ? h : buffers.attended_;
  RETURN_IF_ERROR(backend_.Attention(planes[0], planes[1], planes[2], nullptr, dims_.n_heads,
                                     attention_scale_, /*causal=*/false, attended));
  return backend_.LinearResidual(attended, w.out_w, &w.out_b, Activation::kNone, x, x);
}

absl::Status WhisperModel::ProjectCross(const EncoderBuffers& buffers, DecoderState& state) const {
  const Tensor& encoded = buffers.x_;
  // A state of a model with short windows learns on the device how many positions its rows'
  // windows hold, for the cross-attention (and on the host from NoteWindowPositions, for the
  // choice of path: DecoderState::holds_short_window).
  if (state.cross_lengths_.defined()) {
    RETURN_IF_ERROR(backend_.Copy(buffers.cross_lengths_, state.cross_lengths_));
  }
  if (buffers.positions() < dims_.n_audio_ctx) return ProjectShortCross(buffers, state);
  const LargeKernels large_kernels(backend_);
  // The encoder output itself for the absorbed cross-attention (f32 → f16 with an f16 cache, or
  // i8 with its scales: WhisperModelOptions::quantized_cross_source).
  if (state.cross_source_scales_.defined()) {
    RETURN_IF_ERROR(
        backend_.QuantizeChannels(encoded, state.cross_source_, state.cross_source_scales_));
  } else if (state.cross_source_.defined()) {
    RETURN_IF_ERROR(backend_.Copy(encoded, state.cross_source_));
  }
  if (cross_kv_w_.defined()) {
    // Every layer's K and V from one GEMM, each written into its cache (state rows or a view).
    std::vector<Tensor> planes;
    for (int i = 0; i < dims_.n_decoder_layers; ++i) {
      planes.push_back(state.cross_k_[static_cast<size_t>(i)]);
      planes.push_back(state.cross_v_[static_cast<size_t>(i)]);
    }
    return backend_.LinearPlanes(encoded, cross_kv_w_, &cross_kv_b_, planes);
  }
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    const AttentionWeights& w = decoder_layers_[static_cast<size_t>(i)].cross_attention;
    RETURN_IF_ERROR(backend_.Linear(encoded, w.k_w, &w.k_b, Activation::kNone, state.cross_k_[i]));
    RETURN_IF_ERROR(backend_.Linear(encoded, w.v_w, &w.v_b, Activation::kNone, state.cross_v_[i]));
  }
  return absl::OkStatus();
}

// A short window's K/V go into the first positions of each row's caches: one projection a row
// (a row's first positions are contiguous, the batch's are not).
absl::Status WhisperModel::ProjectShortCross(const EncoderBuffers& buffers,
                                             DecoderState& state) const {
  // (The absorbed cross-attention's encoder output is left as it was: rows of short windows
  // step over the K/V caches.)
  const LargeKernels large_kernels(backend_);
  const int64_t p = buffers.positions(), d = dims_.d_model;
  auto first_positions = [&](const Tensor& cache, int64_t row) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, cache.Slice(row, row + 1));
    ASSIGN_OR_RETURN(t, t.Reshape({dims_.n_audio_ctx, d}));
    ASSIGN_OR_RETURN(t, t.Slice(0, p));
    return t.Reshape({1, p, d});
  };
  for (int64_t row = 0; row < buffers.batch_size(); ++row) {
    ASSIGN_OR_RETURN(const Tensor encoded, buffers.x_.Slice(row, row + 1));
    std::vector<Tensor> k(static_cast<size_t>(dims_.n_decoder_layers));
    std::vector<Tensor> v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      ASSIGN_OR_RETURN(k[i], first_positions(state.cross_k_[i], row));
      ASSIGN_OR_RETURN(v[i], first_positions(state.cross_v_[i], row));
    }
    if (cross_kv_w_.defined()) {
      std::vector<Tensor> planes;
      for (size_t i = 0; i < k.size(); ++i) {
        planes.push_back(k[i]);
        planes.push_back(v[i]);
      }
      RETURN_IF_ERROR(backend_.LinearPlanes(encoded, cross_kv_w_, &cross_kv_b_, planes));
      continue;
    }
    for (size_t i = 0; i < k.size(); ++i) {
      const AttentionWeights& w = decoder_layers_[i].cross_attention;
      RETURN_IF_ERROR(backend_.Linear(encoded, w.k_w, &w.k_b, Activation::kNone, k[i]));
      RETURN_IF_ERROR(backend_.Linear(encoded, w.v_w, &w.v_b, Activation::kNone, v[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status WhisperModel::StackCrossProjections() {
  const int64_t d = dims_.d_model, planes = 2 * dims_.n_decoder_layers;
  if (planes > Backend::kMaxLinearPlanes) return absl::OkStatus();  // stays one GEMM per plane
  const DType dtype = decoder_layers_.front().cross_attention.k_w.dtype();
  ASSIGN_OR_RETURN(Tensor stacked_w, backend_.Allocate({planes * d, d}, dtype));
  ASSIGN_OR_RETURN(Tensor stacked_b, backend_.Allocate({planes * d}, DType::kF32));
  // The separate tensors stay alive until the copies out of them have run.
  std::vector<Tensor> separate;
  for (int i = 0; i < dims_.n_decoder_layers; ++i) {
    AttentionWeights& w = decoder_layers_[static_cast<size_t>(i)].cross_attention;
    Tensor* parts[2][2] = {{&w.k_w, &w.k_b}, {&w.v_w, &w.v_b}};
    for (int j = 0; j < 2; ++j) {
      const int64_t row = (2 * i + j) * d;
      ASSIGN_OR_RETURN(const Tensor weight, stacked_w.Slice(row, row + d));
      ASSIGN_OR_RETURN(const Tensor bias, stacked_b.Slice(row, row + d));
      RETURN_IF_ERROR(backend_.Copy(*parts[j][0], weight));
      RETURN_IF_ERROR(backend_.Copy(*parts[j][1], bias));
      separate.push_back(std::exchange(*parts[j][0], weight));
      separate.push_back(std::exchange(*parts[j][1], bias));
    }
  }
  RETURN_IF_ERROR(backend_.Synchronize());
  cross_kv_w_ = std::move(stacked_w);
  cross_kv_b_ = std::move(stacked_b);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> WhisperModel::EncoderOutput(absl::Span<const float> mel,
                                                               int batch) const {
  ASSIGN_OR_RETURN(std::unique_ptr<EncoderBuffers> buffers, UploadMel(mel, batch));
  RETURN_IF_ERROR(EncodeOnDevice(*buffers, nullptr));
  return Download<float>(backend_, buffers->x_);
}

absl::Status WhisperModel::Encode(absl::Span<const float> mel, DecoderState& state) const {
  ASSIGN_OR_RETURN(std::unique_ptr<EncoderBuffers> buffers, UploadMel(mel, state.batch_size()));
  RETURN_IF_ERROR(EncodeOnDevice(*buffers, &state));
  return backend_.Synchronize();
}

}  // namespace waav::whisper
