// Silero VAD v5/v6 (16 kHz), written once against the Backend interface.
//
// Per 512-sample frame (32 ms) of one stream, with the 64 samples before it as context:
//   [context 64 | frame 512] -> reflect-pad 64 on the right -> 640 samples
//   STFT as a convolution: 258 bases (129 cos, 129 sin) of 256 taps, hop 128 -> [4, 258]
//   magnitude -> [4, 129]
//   4 × (Conv1d k=3 pad 1 + ReLU): 129->128 s1, 128->64 s2, 64->64 s2, 64->128 s1 -> [1, 128]
//   LSTM cell (128 -> 128) with the stream's (h, c)
//   ReLU, 1×1 convolution 128->1, sigmoid -> speech probability
// This is the graph of silero_vad_16k_op15.onnx (and of the 16 kHz branch of silero_vad.onnx),
// checked node by node; docs/vad.md has the details and the parity with onnxruntime.
//
// How it maps onto the Backend: every frame has the same 4 STFT steps, so the convolutions run
// as matrix products with one row per stream (Linear, ReLU epilogue). The STFT's windows are cut
// on the host (a stride-128 convolution is its windows times the bases), and each encoder
// convolution, over a fixed number of time steps, is its dense (Toeplitz) matrix, built at load
// with the taps that meet the zero padding left out. Same sums as the convolutions; on the CPU
// backend 4x faster at batch 1 than Conv1d, which re-lays its weight out on every call.
//
// The model is immutable after Load() and may be shared by threads that use distinct VadStates,
// on a backend that serialises kernel submission. Streams are batched: one Process() call runs
// one frame of each of B streams.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/backend.h"

namespace waav::vad {

class OnnxConstants;

inline constexpr int kVadSampleRateHz = 16000;
inline constexpr int kVadFrameSamples = 512;   // 32 ms at 16 kHz
inline constexpr int kVadContextSamples = 64;  // carried over from the previous frame
inline constexpr int kVadStateSize = 128;      // LSTM width

// The recurrent state of one audio stream: the LSTM's h and c and the last 64 samples of the
// previous frame. Host memory, owned by the stream and handed to SileroVad with each frame; a new
// or Reset() state is all zeros (Silero's reset_states()).
class VadState {
 public:
  VadState() = default;
  void Reset() { *this = VadState(); }

  absl::Span<const float> h() const { return h_; }
  absl::Span<const float> c() const { return c_; }
  absl::Span<const float> context() const { return context_; }
  // Frames processed since construction or the last Reset().
  int64_t frames() const { return frames_; }

 private:
  friend class SileroVad;
  std::array<float, kVadStateSize> h_{};
  std::array<float, kVadStateSize> c_{};
  std::array<float, kVadContextSamples> context_{};
  int64_t frames_ = 0;
};

class SileroVad {
 public:
  // Reads the weights from an ONNX export of Silero VAD v5/v6 and uploads them to `backend`,
  // which must outlive the model and support Activate, ComplexMagnitude and LstmCell
  // (Unimplemented otherwise). silero_vad_16k_op15.onnx is the file waav uses; silero_vad.onnx
  // (both rates) loads too, its 16 kHz branch being found by the STFT basis's shape. Errors name
  // the file and the weight that is missing or misshapen.
  static absl::StatusOr<std::unique_ptr<SileroVad>> Load(const std::string& onnx_path,
                                                         Backend& backend);
  static absl::StatusOr<std::unique_ptr<SileroVad>> FromConstants(const OnnxConstants& constants,
                                                                  Backend& backend);

  // Speech probability of one frame of each of B streams. `frames` is host [B, 512], 16 kHz
  // samples in [-1, 1]; row b belongs to *states[b], which is advanced. The states must be
  // distinct. Returns [B] probabilities in (0, 1). On error (bad sizes, a non-finite sample, a
  // backend failure) no state is changed.
  absl::StatusOr<std::vector<float>> Process(absl::Span<const float> frames,
                                             absl::Span<VadState* const> states) const;

  // N consecutive frames of one stream (samples.size() = N·512): the same probabilities as N
  // calls of Process(), with the convolutional front end batched over the frames so that only
  // the LSTM steps run one after another. For files, and for a stream catching up.
  absl::StatusOr<std::vector<float>> ProcessSequence(absl::Span<const float> samples,
                                                     VadState& state) const;

  Backend& backend() const { return backend_; }

 private:
  explicit SileroVad(Backend& backend) : backend_(backend) {}

  // STFT, magnitude and encoder on `windows` (host [R, 4, 256]): the LSTM input [R, 128].
  absl::StatusOr<Tensor> RunFrontEnd(const std::vector<float>& windows, int64_t rows) const;
  // ReLU, 1×1 convolution and sigmoid on h [R, 128]: probabilities on the host.
  absl::StatusOr<std::vector<float>> RunDecoder(const Tensor& h) const;

  Backend& backend_;
  Tensor stft_basis_;  // [258, 256]
  // Encoder layer l as a matrix [t_out·Cout, t_in·Cin] and its bias repeated per step.
  std::array<Tensor, 4> encoder_w_, encoder_b_;
  Tensor lstm_w_, lstm_b_;        // [512, 256] = [weight_ih | weight_hh]; [512] = bias_ih + bias_hh
  Tensor decoder_w_, decoder_b_;  // [1, 128]; [1]
};

}  // namespace waav::vad
