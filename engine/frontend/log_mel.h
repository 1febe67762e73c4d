// Whisper's log-mel spectrogram, computed exactly as faster-whisper 1.2.1's FeatureExtractor does
// (docs/frontend.md gives the definition, the parity test and the measured error):
//
//   x   ← samples followed by `padding_samples` zeros
//   S_f ← |rfft(hann(n_fft) · x[f·hop − n_fft/2, f·hop + n_fft/2))|²   (reflect-padded at both
//         ends, periodic Hann; frames f = 0 .. len(x)/hop − 1: the STFT's last frame is dropped)
//   M   ← mel_filters · S     (Slaney-style filterbank over 0 .. sample_rate/2, area-normalised)
//   L   ← log10(max(M, 1e-10));  L ← max(L, max(L) − 8);  L ← (L + 4) / 4
//
// where max(L) is taken over the whole input. Everything is float32 like faster-whisper's numpy
// code, except the window and filterbank, computed in double and rounded once (as numpy does).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/frontend/real_fft.h"

namespace waav::frontend {

struct LogMelOptions {
  // Rate of the input samples. Default: 16000 (Whisper).
  int sample_rate_hz = 16000;
  // STFT size and window length, in samples. Default: 400 (25 ms). Must be even.
  int n_fft = 400;
  // STFT hop, in samples. Default: 160 (10 ms).
  int hop_length = 160;
  // Mel bins. Default: 80 (every Whisper model except large-v3, which uses 128).
  int n_mels = 80;
  // Zeros appended to the input before the STFT; faster-whisper's FeatureExtractor(padding=160).
  // With the default, n samples give n/160 + 1 frames. Default: 160.
  int padding_samples = 160;

  absl::Status Validate() const;
};

// The front end: the window, filterbank and FFT plan, built once. Immutable after construction,
// so one instance may be shared by any number of threads. Copyable and movable.
class LogMel {
 public:
  // Row-major [n_mels, n_frames]: frame f of mel bin m at data[m * n_frames + f].
  struct Features {
    std::vector<float> data;
    int n_mels = 0;
    int n_frames = 0;
  };

  // Whisper's front end (the default options).
  LogMel();
  // InvalidArgument when the options fail Validate().
  static absl::StatusOr<LogMel> Create(const LogMelOptions& options);

  const LogMelOptions& options() const { return options_; }
  // Frequency bins of one STFT frame: n_fft/2 + 1.
  int num_bins() const { return fft_.num_bins(); }
  // The periodic Hann window, n_fft values.
  const std::vector<float>& window() const { return window_; }
  // The filterbank, row-major [n_mels, num_bins()].
  const std::vector<float>& mel_filters() const { return filters_; }

  // Frames Compute() returns for `n_samples` samples: (n_samples + padding_samples) / hop_length.
  int64_t NumFrames(int64_t n_samples) const;

  // Log-mel of a whole signal. Samples must be finite (the WAV reader guarantees it); the
  // normalisation uses the maximum over all of them.
  Features Compute(absl::Span<const float> samples) const;

  // Streaming building blocks. Compute(x) is MelPower over all frames of x plus its end
  // padding, followed by Normalize.
  //
  // Mel power (before the log) of frames [first_frame, first_frame + count) of `signal`, the
  // samples as the STFT sees them (for Compute: the input followed by its padding zeros). Frame
  // f covers samples [f·hop − n_fft/2, f·hop + n_fft/2), reflected at both ends of `signal` as
  // numpy's reflect padding does; a frame with f·hop + n_fft/2 <= signal.size() and
  // f·hop >= n_fft/2 depends on nothing but its own samples, so a streaming caller can compute
  // it as soon as they have arrived. Frames exist for f in [0, signal.size()/hop] (the last of
  // these is the one Compute drops). Writes frame f of mel bin m to
  // out[m * out_stride + (f − first_frame)]. InvalidArgument for frames outside that range or an
  // `out` too small.
  absl::Status MelPower(absl::Span<const float> signal, int64_t first_frame, int64_t count,
                        absl::Span<float> out, int64_t out_stride) const;

  // Whisper's normalisation, in place: log10(max(x, 1e-10)), then clamping to (maximum over all
  // of `mel` − 8), then (x + 4) / 4. Apply it to exactly the frames the maximum should cover
  // (Compute: the whole input).
  static void Normalize(absl::Span<float> mel);

  // For callers that keep the frames of a growing input (a stream's utterance so far) instead
  // of computing them again: the pieces of Compute, each value as Compute makes it, bit for bit.
  //
  // Mel power of frames [first_frame, first_frame + count) of Compute(samples) (the samples
  // followed by the padding zeros), written as MelPower writes them. InvalidArgument outside
  // [0, NumFrames(samples.size())] or for an `out` too small.
  absl::Status InputMelPower(absl::Span<const float> samples, int64_t first_frame, int64_t count,
                             absl::Span<float> out, int64_t out_stride) const;
  // How many of Compute's first frames for `n_samples` samples depend on those samples alone,
  // neither on the end's padding nor on its reflection, so that they keep their values when
  // more samples are appended.
  int64_t StableFrames(int64_t n_samples) const;
  // Normalize's first half, in place: log10(max(x, 1e-10)); returns the largest result (−inf
  // for none). Its second half: NormalizeLog(x, maximum) for each value.
  static float LogPower(absl::Span<float> mel);
  static float NormalizeLog(float log_power, float maximum) {
    return (std::max(log_power, maximum - kDynamicRange) + 4.0f) / 4.0f;
  }
  static constexpr float kDynamicRange = 8.0f;

 private:
  explicit LogMel(const LogMelOptions& options);

  // MelPower and InputMelPower: the arguments checked, then MelPowerImpl.
  absl::Status CheckedMelPower(const float* x, int64_t n_real, int64_t n_total,
                               int64_t first_frame, int64_t count, absl::Span<float> out,
                               int64_t out_stride) const;
  // MelPower over a signal of `n_total` samples whose samples at [n_real, n_total) are zeros
  // not stored in `x` (Compute's end padding, without copying the input).
  void MelPowerImpl(const float* x, int64_t n_real, int64_t n_total, int64_t first_frame,
                    int64_t count, float* out, int64_t out_stride) const;

  LogMelOptions options_;
  BatchedRealFft fft_;
  std::vector<float> window_;
  std::vector<float> filters_;
  // The filterbank without its zeros: mel bin m has weights band_weights_[band_offset_[m] + i]
  // for FFT bins band_first_[m] + i, i in [0, band_offset_[m + 1] − band_offset_[m]).
  std::vector<int> band_first_;
  std::vector<int> band_offset_;
  std::vector<float> band_weights_;
};

}  // namespace waav::frontend
