// Endpointing: turns per-frame voice-activity probabilities into utterance boundaries.
//
// Hysteresis as in Silero VAD's own segmentation: speech starts when the probability reaches
// `threshold` and has stayed in speech for `min_speech_ms`; it ends after `silence_ms` of frames
// below `threshold − hysteresis`, or when the utterance reaches `max_utterance_ms`. Frames between
// the two thresholds keep the current state. Times are in samples of the 16 kHz stream.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace waav::streaming {

struct EndpointConfig {
  // Speech probability at or above which a frame is speech. Default: 0.5.
  float threshold = 0.5f;
  // Below threshold − hysteresis a frame is silence. Default: 0.15 (as Silero's segmentation).
  float hysteresis = 0.15f;
  // Speech shorter than this is ignored (clicks, breaths). Default: 250 ms.
  int min_speech_ms = 250;
  // Trailing silence that ends an utterance. Default: 500 ms.
  int silence_ms = 500;
  // An utterance is cut here even without silence. Default: 30000 ms (one Whisper window).
  int max_utterance_ms = 30000;
  // Audio kept before the detected start and after the end, so word edges are not clipped.
  // Default: 200 ms.
  int speech_pad_ms = 200;
  // The same before the start of an utterance the VAD hears cold: a stream's first, or one
  // after `cold_after_ms` of no utterance. Silero VAD from a fresh state judges onsets late (an
  // unvoiced "pr", "th", "it" below 0.5 until 160-352 ms into the speech on 6 of 32 LJ Speech
  // clips), and its state cools again over long pauses (after a clip and 10 s of faint noise up
  // to 288 ms late, 30 s 384; 0-32 ms after 1-3 s); a window that starts inside
  // the first word loses it: the final of LJ001-0001.wav said "in the only sense" for
  // "Printing, in the only sense". After short pauses `speech_pad_ms` stays (400 there made a
  // start partial worse on jfk.wav's last sentence). bench/vad_onset_lag.py measures the lags.
  // A start never reaches back before the previous utterance's padded end. Default: 400 ms
  // (faster-whisper's VAD padding).
  int cold_start_pad_ms = 400;
  // No utterance for this long (from the previous one's padded end to the next one's first
  // speech frame) and the next start is padded by `cold_start_pad_ms`. Default: 5000 ms
  // (Silero's onsets were at most 96 ms late after 5 s of faint noise, 288 after 10 s).
  int cold_after_ms = 5000;

  [[nodiscard]] absl::Status Validate() const;
};

enum class EndReason { kSilence, kMaxLength, kEndOfAudio };

struct UtteranceStart {
  int64_t start_sample;     // padded start (never before the stream's first sample)
  int64_t detected_sample;  // where the start was confirmed
};
struct UtteranceEnd {
  int64_t end_sample;       // padded end of the speech
  int64_t detected_sample;  // where the end was confirmed
  EndReason reason;
};

class Endpointer {
 public:
  static constexpr int kSampleRateHz = 16000;

  explicit Endpointer(const EndpointConfig& config);

  // Feeds the probability of the frame [frame_start, frame_start + frame_samples). Returns a
  // start when speech is confirmed, an end when it is over; never both for one frame.
  struct Update {
    std::optional<UtteranceStart> started;
    std::optional<UtteranceEnd> ended;
  };
  Update Push(float probability, int64_t frame_start, int frame_samples);
  // End of audio: closes an open utterance at `stream_end_sample`.
  std::optional<UtteranceEnd> Finish(int64_t stream_end_sample);

  bool in_speech() const { return state_ == State::kSpeech; }
  // Start of the current utterance (padded), when in speech.
  int64_t utterance_start() const { return utterance_start_; }
  // End of the latest speech frame plus the padding, when in speech: audio after it has been
  // judged silence so far, so an interim decode need not include it.
  int64_t padded_speech_end() const { return last_speech_end_ + Ms(config_.speech_pad_ms); }
  // Start of the current run of silent frames inside the utterance (a pause that may or may not
  // become the endpoint), or -1 while the latest frames are speech.
  int64_t silence_since() const { return state_ == State::kSpeech ? silence_since_ : -1; }

 private:
  enum class State { kSilence, kMaybeSpeech, kSpeech };
  int64_t Ms(int ms) const { return static_cast<int64_t>(ms) * kSampleRateHz / 1000; }

  EndpointConfig config_;
  State state_ = State::kSilence;
  int64_t candidate_start_ = 0;  // first speech frame of a not yet confirmed start
  int64_t utterance_start_ = 0;  // padded start of the confirmed utterance
  int64_t start_floor_ = 0;      // the earliest sample the next utterance may start at
  bool started_before_ = false;  // an utterance was confirmed earlier in the stream
  int64_t previous_end_ = 0;     // the previous utterance's end (padded, or the cut)
  int64_t last_speech_end_ = 0;  // end of the latest frame at or above threshold
  int64_t silence_since_ = -1;   // start of the current run of silent frames, −1 if none
};

}  // namespace waav::streaming
