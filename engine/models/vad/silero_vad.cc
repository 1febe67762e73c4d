#include "engine/models/vad/silero_vad.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/models/vad/onnx_constants.h"
#include "engine/runtime/status.h"

namespace waav::vad {
namespace {

// The STFT of the 16 kHz model: 256-tap bases, hop 128, 129 frequency bins (cos and sin).
constexpr int64_t kFftTaps = 256;
constexpr int64_t kHop = 128;
constexpr int64_t kBins = 129;
// [context | frame] reflect-padded by 64 on the right (F.pad(x, (0, 64), mode="reflect")).
constexpr int64_t kInputSamples = kVadContextSamples + kVadFrameSamples;  // 576
constexpr int64_t kReflectSamples = 64;
constexpr int64_t kPaddedSamples = kInputSamples + kReflectSamples;      // 640
constexpr int64_t kStftFrames = (kPaddedSamples - kFftTaps) / kHop + 1;  // 4
constexpr int64_t kWindowFloats = kStftFrames * kFftTaps;                // per stream frame
constexpr int64_t kHidden = kVadStateSize;
// ProcessSequence runs the front end on at most this many frames at a time, which bounds its
// workspace (about 13 KiB per frame).
constexpr int64_t kSequenceChunkFrames = 256;

// Encoder layer: Cout, Cin, stride; kernel 3, padding 1, ReLU.
struct ConvLayer {
  int64_t out_channels, in_channels;
  int stride;
};
constexpr std::array<ConvLayer, 4> kEncoder = {
    {{128, kBins, 1}, {64, 128, 2}, {64, 64, 2}, {128, 64, 1}}};

constexpr const char* kBasisName = "stft.forward_basis_buffer";

// Weight names end in the PyTorch module path; the prefix depends on the export ("model." in
// silero_vad_16k_op15.onnx, "If_0_then_branch__Inline_0__" in silero_vad.onnx). The 16 kHz set is
// the one whose STFT basis is float32 [258, 1, 256] (the 8 kHz basis is [130, 1, 128]).
absl::StatusOr<std::string> FindPrefix(const OnnxConstants& constants) {
  std::vector<std::string> prefixes;
  for (const std::string& name : constants.Names()) {
    if (!absl::EndsWith(name, kBasisName)) continue;
    if (constants.Floats(name, {2 * kBins, 1, kFftTaps}).ok()) {
      prefixes.push_back(name.substr(0, name.size() - std::strlen(kBasisName)));
    }
  }
  if (prefixes.size() == 1) return prefixes[0];
  if (prefixes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(constants.origin(),
                     ": no 16 kHz Silero VAD STFT basis (a float32 [258, 1, 256] constant "
                     "named '…",
                     kBasisName, "'); is this a Silero VAD v5/v6 model?"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      constants.origin(), ": ", prefixes.size(), " constants look like the 16 kHz STFT basis ('",
      prefixes[0], kBasisName, "', '", prefixes[1], kBasisName, "')"));
}

// The STFT windows of one stream frame, host [4, 256]: window t is samples [128·t, 128·t + 256)
// of [context | frame] reflect-padded by 64 (x[576 + j] = x[574 − j]).
void FrameWindows(absl::Span<const float> context, absl::Span<const float> frame, float* windows) {
  std::array<float, kPaddedSamples> padded;
  std::copy(context.begin(), context.end(), padded.begin());
  std::copy(frame.begin(), frame.end(), padded.begin() + kVadContextSamples);
  for (int64_t j = 0; j < kReflectSamples; ++j) {
    padded[kInputSamples + j] = padded[kInputSamples - 2 - j];
  }
  for (int64_t t = 0; t < kStftFrames; ++t) {
    std::copy_n(padded.begin() + t * kHop, kFftTaps, windows + t * kFftTaps);
  }
}

// A convolution (kernel 3, padding 1) over a fixed number of time steps as one dense matrix, its
// Toeplitz form: y[t_out·Cout + o] = Σ w[o, c, j] · x[(t_out·stride − 1 + j)·Cin + c] over the
// taps that fall inside [0, t_in), i.e. exactly the convolution, taps on the zero padding left
// out. Host [t_out·Cout, t_in·Cin], time-major on both sides like the activations.
std::vector<float> ConvAsMatrix(absl::Span<const float> w, const ConvLayer& layer, int64_t t_in,
                                int64_t t_out) {
  const int64_t cout = layer.out_channels, cin = layer.in_channels;
  std::vector<float> dense(static_cast<size_t>(t_out * cout * t_in * cin), 0.0f);
  for (int64_t to = 0; to < t_out; ++to) {
    for (int64_t o = 0; o < cout; ++o) {
      float* row = dense.data() + (to * cout + o) * t_in * cin;
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t ti = to * layer.stride - 1 + j;
        if (ti < 0 || ti >= t_in) continue;
        for (int64_t c = 0; c < cin; ++c)
          row[ti * cin + c] = w[static_cast<size_t>((o * cin + c) * 3 + j)];
      }
    }
  }
  return dense;
}

absl::Status CheckFinite(absl::Span<const float> samples, const char* what) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": sample ", i, " is ", samples[i],
                                                     " (a non-finite sample would poison the "
                                                     "stream's state)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SileroVad>> SileroVad::Load(const std::string& onnx_path,
                                                           Backend& backend) {
  ASSIGN_OR_RETURN(OnnxConstants constants, OnnxConstants::Read(onnx_path));
  return FromConstants(constants, backend);
}

absl::StatusOr<std::unique_ptr<SileroVad>> SileroVad::FromConstants(const OnnxConstants& constants,
                                                                    Backend& backend) {
  for (auto [op, name] : {std::pair{Op::kActivate, "Activate"},
                          {Op::kComplexMagnitude, "ComplexMagnitude"},
                          {Op::kLstmCell, "LstmCell"}}) {
    if (!backend.supports(op)) {
      return absl::UnimplementedError(absl::StrCat("Silero VAD needs ", name, ", which backend '",
                                                   std::string(backend.name()),
                                                   "' does not implement"));
    }
  }
  ASSIGN_OR_RETURN(const std::string prefix, FindPrefix(constants));
  auto weights = [&](const std::string& name,
                     const std::vector<int64_t>& dims) -> absl::StatusOr<absl::Span<const float>> {
    return constants.Floats(prefix + name, dims);
  };
  auto upload = [&](const std::string& name, const Shape& shape) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(absl::Span<const float> w, weights(name, shape.dims()));
    return Upload(backend, shape, DType::kF32, w.data());
  };

  auto vad = std::unique_ptr<SileroVad>(new SileroVad(backend));
  // The STFT convolution (stride 128 over [B, 1, 640]) is a product of its windows with the
  // bases: [258, 1, 256] used as a Linear weight [258, 256].
  ASSIGN_OR_RETURN(auto basis, weights(kBasisName, {2 * kBins, 1, kFftTaps}));
  ASSIGN_OR_RETURN(vad->stft_basis_,
                   Upload(backend, {2 * kBins, kFftTaps}, DType::kF32, basis.data()));
  int64_t t_in = kStftFrames;
  for (size_t l = 0; l < kEncoder.size(); ++l) {
    const ConvLayer& layer = kEncoder[l];
    const std::string p = absl::StrCat("encoder.", l, ".reparam_conv.");
    ASSIGN_OR_RETURN(auto w, weights(p + "weight", {layer.out_channels, layer.in_channels, 3}));
    ASSIGN_OR_RETURN(auto b, weights(p + "bias", {layer.out_channels}));
    const int64_t t_out = (t_in + 2 * 1 - 3) / layer.stride + 1;
    const std::vector<float> dense = ConvAsMatrix(w, layer, t_in, t_out);
    std::vector<float> bias;
    for (int64_t t = 0; t < t_out; ++t) bias.insert(bias.end(), b.begin(), b.end());
    const int64_t outputs = t_out * layer.out_channels;
    ASSIGN_OR_RETURN(vad->encoder_w_[l], Upload(backend, {outputs, t_in * layer.in_channels},
                                                DType::kF32, dense.data()));
    ASSIGN_OR_RETURN(vad->encoder_b_[l], Upload(backend, {outputs}, DType::kF32, bias.data()));
    t_in = t_out;
  }
  if (t_in != 1) return absl::InternalError("Silero VAD encoder does not end in one time step");

  // PyTorch's LSTMCell weights side by side, biases summed: one GEMM over [x | h] per step.
  ASSIGN_OR_RETURN(auto w_ih, weights("decoder.rnn.weight_ih", {4 * kHidden, kHidden}));
  ASSIGN_OR_RETURN(auto w_hh, weights("decoder.rnn.weight_hh", {4 * kHidden, kHidden}));
  ASSIGN_OR_RETURN(auto b_ih, weights("decoder.rnn.bias_ih", {4 * kHidden}));
  ASSIGN_OR_RETURN(auto b_hh, weights("decoder.rnn.bias_hh", {4 * kHidden}));
  std::vector<float> fused(static_cast<size_t>(4 * kHidden * 2 * kHidden));
  std::vector<float> bias(static_cast<size_t>(4 * kHidden));
  for (int64_t g = 0; g < 4 * kHidden; ++g) {
    std::copy_n(w_ih.data() + g * kHidden, kHidden, fused.data() + g * 2 * kHidden);
    std::copy_n(w_hh.data() + g * kHidden, kHidden, fused.data() + g * 2 * kHidden + kHidden);
    bias[static_cast<size_t>(g)] = b_ih[static_cast<size_t>(g)] + b_hh[static_cast<size_t>(g)];
  }
  ASSIGN_OR_RETURN(vad->lstm_w_,
                   Upload(backend, {4 * kHidden, 2 * kHidden}, DType::kF32, fused.data()));
  ASSIGN_OR_RETURN(vad->lstm_b_, Upload(backend, {4 * kHidden}, DType::kF32, bias.data()));

  // The decoder's 1×1 convolution [1, 128, 1] is a Linear with one output.
  ASSIGN_OR_RETURN(auto dec_w, weights("decoder.decoder.2.weight", {1, kHidden, 1}));
  ASSIGN_OR_RETURN(vad->decoder_w_, Upload(backend, {1, kHidden}, DType::kF32, dec_w.data()));
  ASSIGN_OR_RETURN(vad->decoder_b_, upload("decoder.decoder.2.bias", {1}));
  RETURN_IF_ERROR(backend.Synchronize());
  return vad;
}

absl::StatusOr<Tensor> SileroVad::RunFrontEnd(const std::vector<float>& windows,
                                              int64_t rows) const {
  Backend& be = backend_;
  ASSIGN_OR_RETURN(Tensor input,
                   Upload(be, {rows * kStftFrames, kFftTaps}, DType::kF32, windows.data()));
  ASSIGN_OR_RETURN(Tensor spectrum, be.Allocate({rows * kStftFrames, 2 * kBins}, DType::kF32));
  RETURN_IF_ERROR(be.Linear(input, stft_basis_, nullptr, Activation::kNone, spectrum));
  ASSIGN_OR_RETURN(Tensor x, be.Allocate({rows, kStftFrames * kBins}, DType::kF32));
  ASSIGN_OR_RETURN(Tensor magnitude, x.Reshape({rows * kStftFrames, kBins}));
  RETURN_IF_ERROR(be.ComplexMagnitude(spectrum, magnitude));
  // Each layer maps all time steps of a stream at once: [rows, t_in·Cin] -> [rows, t_out·Cout].
  for (size_t l = 0; l < kEncoder.size(); ++l) {
    ASSIGN_OR_RETURN(Tensor y, be.Allocate({rows, encoder_w_[l].dim(0)}, DType::kF32));
    RETURN_IF_ERROR(be.Linear(x, encoder_w_[l], &encoder_b_[l], Activation::kRelu, y));
    x = y;
  }
  return x;  // [rows, 128]: one time step is left after the two stride-2 layers
}

absl::StatusOr<std::vector<float>> SileroVad::RunDecoder(const Tensor& h) const {
  const int64_t rows = h.dim(0);
  ASSIGN_OR_RETURN(Tensor relu, backend_.Allocate({rows, kHidden}, DType::kF32));
  RETURN_IF_ERROR(backend_.Activate(h, Activation::kRelu, relu));
  ASSIGN_OR_RETURN(Tensor probability, backend_.Allocate({rows, 1}, DType::kF32));
  RETURN_IF_ERROR(
      backend_.Linear(relu, decoder_w_, &decoder_b_, Activation::kSigmoid, probability));
  return Download<float>(backend_, probability);
}

absl::StatusOr<std::vector<float>> SileroVad::Process(absl::Span<const float> frames,
                                                      absl::Span<VadState* const> states) const {
  const int64_t batch = static_cast<int64_t>(states.size());
  if (batch == 0 || static_cast<int64_t>(frames.size()) != batch * kVadFrameSamples) {
    return absl::InvalidArgumentError(absl::StrCat("SileroVad::Process: ", frames.size(),
                                                   " samples for ", batch, " streams; expected ",
                                                   kVadFrameSamples, " per stream"));
  }
  absl::flat_hash_set<const VadState*> seen;
  for (int64_t b = 0; b < batch; ++b) {
    if (states[b] == nullptr || !seen.insert(states[b]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SileroVad::Process: state ", b, states[b] == nullptr ? " is null" : " appears twice"));
    }
  }
  RETURN_IF_ERROR(CheckFinite(frames, "SileroVad::Process"));

  std::vector<float> windows(static_cast<size_t>(batch * kWindowFloats));
  std::vector<float> state(static_cast<size_t>(2 * batch * kHidden));  // [h rows; c rows]
  for (int64_t b = 0; b < batch; ++b) {
    const VadState& s = *states[b];
    FrameWindows(s.context_, frames.subspan(b * kVadFrameSamples, kVadFrameSamples),
                 windows.data() + b * kWindowFloats);
    std::copy(s.h_.begin(), s.h_.end(), state.begin() + b * kHidden);
    std::copy(s.c_.begin(), s.c_.end(), state.begin() + (batch + b) * kHidden);
  }
  ASSIGN_OR_RETURN(Tensor x, RunFrontEnd(windows, batch));
  ASSIGN_OR_RETURN(Tensor hc, Upload(backend_, {2 * batch, kHidden}, DType::kF32, state.data()));
  ASSIGN_OR_RETURN(Tensor h, hc.Slice(0, batch));
  ASSIGN_OR_RETURN(Tensor c, hc.Slice(batch, 2 * batch));
  RETURN_IF_ERROR(backend_.LstmCell(x, h, c, lstm_w_, lstm_b_, h, c));
  ASSIGN_OR_RETURN(std::vector<float> probabilities, RunDecoder(h));
  RETURN_IF_ERROR(backend_.CopyToHost(hc, state.data(), state.size() * sizeof(float)));

  for (int64_t b = 0; b < batch; ++b) {
    VadState& s = *states[b];
    std::copy_n(state.begin() + b * kHidden, kHidden, s.h_.begin());
    std::copy_n(state.begin() + (batch + b) * kHidden, kHidden, s.c_.begin());
    const float* frame = frames.data() + b * kVadFrameSamples;
    std::copy_n(frame + kVadFrameSamples - kVadContextSamples, kVadContextSamples,
                s.context_.begin());
    ++s.frames_;
  }
  return probabilities;
}

absl::StatusOr<std::vector<float>> SileroVad::ProcessSequence(absl::Span<const float> samples,
                                                              VadState& state) const {
  if (samples.size() % kVadFrameSamples != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SileroVad::ProcessSequence: ", samples.size(),
                                                   " samples is not a whole number of ",
                                                   kVadFrameSamples, "-sample frames"));
  }
  RETURN_IF_ERROR(CheckFinite(samples, "SileroVad::ProcessSequence"));
  const int64_t total = static_cast<int64_t>(samples.size()) / kVadFrameSamples;
  std::vector<float> probabilities;
  probabilities.reserve(static_cast<size_t>(total));
  ASSIGN_OR_RETURN(Tensor h0, Upload(backend_, {1, kHidden}, DType::kF32, state.h_.data()));
  ASSIGN_OR_RETURN(Tensor c, Upload(backend_, {1, kHidden}, DType::kF32, state.c_.data()));
  Tensor h_last = h0;
  for (int64_t first = 0; first < total; first += kSequenceChunkFrames) {
    const int64_t rows = std::min(kSequenceChunkFrames, total - first);
    std::vector<float> windows(static_cast<size_t>(rows * kWindowFloats));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t frame = first + r;
      absl::Span<const float> context =
          frame == 0
              ? absl::Span<const float>(state.context_)
              : samples.subspan(frame * kVadFrameSamples - kVadContextSamples, kVadContextSamples);
      FrameWindows(context, samples.subspan(frame * kVadFrameSamples, kVadFrameSamples),
                   windows.data() + r * kWindowFloats);
    }
    ASSIGN_OR_RETURN(Tensor x, RunFrontEnd(windows, rows));
    // The LSTM, one frame after another; row t of `hs` is h after frame first + t.
    ASSIGN_OR_RETURN(Tensor hs, backend_.Allocate({rows, kHidden}, DType::kF32));
    for (int64_t t = 0; t < rows; ++t) {
      ASSIGN_OR_RETURN(Tensor x_t, x.Slice(t, t + 1));
      ASSIGN_OR_RETURN(Tensor h_t, hs.Slice(t, t + 1));
      RETURN_IF_ERROR(backend_.LstmCell(x_t, h_last, c, lstm_w_, lstm_b_, h_t, c));
      h_last = h_t;
    }
    ASSIGN_OR_RETURN(std::vector<float> chunk, RunDecoder(hs));
    probabilities.insert(probabilities.end(), chunk.begin(), chunk.end());
    // h_last is a row of this chunk's `hs`; the next chunk reads it before writing its own rows.
  }
  if (total > 0) {
    std::array<float, kVadStateSize> h{}, c_host{};
    RETURN_IF_ERROR(backend_.CopyToHost(h_last, h.data(), sizeof(h)));
    RETURN_IF_ERROR(backend_.CopyToHost(c, c_host.data(), sizeof(c_host)));
    state.h_ = h;
    state.c_ = c_host;
    std::copy(samples.end() - kVadContextSamples, samples.end(), state.context_.begin());
    state.frames_ += total;
  }
  return probabilities;
}

}  // namespace waav::vad
