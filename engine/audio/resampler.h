// Sample-rate conversion through libsoxr, one-shot and streaming.
//
// Quality: SOXR_HQ (soxr's 20-bit recipe: linear phase, passband to 91.3% of the lower Nyquist
// rate, ~120 dB stop-band rejection). Whisper's log-mel front end clamps everything 80 dB below
// the loudest mel bin, so resampling artefacts 120 dB down cannot change the features, while
// SOXR_VHQ (28-bit) costs noticeably more per sample for no visible difference. Both the one-shot
// and the streaming path use the same recipe and one thread, so they agree to float rounding.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/audio/wav_reader.h"

struct soxr;  // libsoxr's opaque handle (soxr_t is `struct soxr*`)

namespace waav::audio {

// The rate Whisper's front end expects.
inline constexpr int kWhisperSampleRateHz = 16000;

// Resamples a whole mono signal. Identical rates return a copy. The output has about
// in.size() * to_hz / from_hz samples, aligned with the input (soxr removes its filter delay).
absl::StatusOr<std::vector<float>> Resample(absl::Span<const float> in, int from_hz, int to_hz);

// Resamples a mono signal that arrives in pieces. Feed pieces to Process() in order, then call
// Flush() once at the end of the signal; the concatenated outputs equal Resample() of the whole
// signal to float rounding. After Flush() the resampler is ready for a new, unrelated signal.
// Not thread-safe; movable, not copyable.
class StreamingResampler {
 public:
  // InvalidArgument for rates that are not positive.
  static absl::StatusOr<StreamingResampler> Create(int from_hz, int to_hz);

  StreamingResampler(StreamingResampler&& other) noexcept;
  StreamingResampler& operator=(StreamingResampler&& other) noexcept;
  StreamingResampler(const StreamingResampler&) = delete;
  StreamingResampler& operator=(const StreamingResampler&) = delete;
  ~StreamingResampler();

  // Returns the output that is ready after `in` (possibly empty: soxr holds back a filter's
  // length of input until it has the samples that follow).
  absl::StatusOr<std::vector<float>> Process(absl::Span<const float> in);
  // Ends the signal and returns the held-back tail.
  absl::StatusOr<std::vector<float>> Flush();

  int from_hz() const { return from_hz_; }
  int to_hz() const { return to_hz_; }

 private:
  StreamingResampler(int from_hz, int to_hz, soxr* handle)
      : from_hz_(from_hz), to_hz_(to_hz), soxr_(handle) {}

  int from_hz_ = 0;
  int to_hz_ = 0;
  soxr* soxr_ = nullptr;  // owned; null when the rates are equal (pass-through)
};

// Reads a WAV file, mixes it to mono and resamples it to 16 kHz: the input Whisper expects.
absl::StatusOr<Audio> LoadAudio16k(const std::string& path);

}  // namespace waav::audio
