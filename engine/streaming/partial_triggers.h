// When an open utterance gets an interim decode (a partial result), decided per VAD frame.
//
// Four triggers, each counted in samples of stream audio heard by the VAD:
// - start: start_partial_ms after the utterance's start is confirmed (the speech that confirmed
//   it is often a whole first word, which would otherwise wait for the interval);
// - pause: once speech has paused pause_partial_ms (silence shorter than the endpoint's), one per
//   pause, none when nothing new was said, while the scheduler is behind, or while the stream's
//   previous window is still being decoded (docs/benchmarks.md, sessions 31-32);
// - gap: a frame that starts a gap between words (WordGapDetector), once gap_partial_min_ms of
//   speech has arrived since the last partial and no window of the stream is being decoded;
// - interval: partial_interval_ms of speech since the last partial (the fallback for speech
//   without gaps or pauses; every other trigger restarts its count).
// A partial covers the utterance up to the padded end of the speech heard so far: over a pause
// that may be the endpoint, Whisper would only be asked to transcribe silence (where it
// hallucinates) and the result could not change. No new speech, no new decode.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/streaming/stream_types.h"

namespace waav::streaming {

// What the frontend knows at the end of a VAD frame.
struct HeardSpeech {
  int64_t samples = 0;            // stream audio through the VAD so far
  bool in_speech = false;         // inside a confirmed utterance
  int64_t silence_since = -1;     // start of the current run of silent frames inside it; -1: none
  int64_t padded_speech_end = 0;  // end of the latest speech frame plus the endpoint's padding
  bool word_gap = false;          // this frame starts a gap between words
};

// The load the scheduler and the stream are under when the frame is judged.
struct DecodeLoad {
  bool scheduler_behind = false;  // the scheduler's latest round left streams waiting
  bool stream_decoding = false;   // a window of this stream is in the scheduler's round
};

class PartialTriggers {
 public:
  explicit PartialTriggers(const StreamOptions& options);

  // An utterance's start was confirmed with `heard` samples through the VAD.
  void UtteranceStarted(int64_t heard);
  // The open utterance ended (its final is queued); a start partial not yet due is dropped.
  void UtteranceEnded() { start_partial_at_ = -1; }

  // Judges one frame: returns the end sample of the audio a partial should cover now, or none.
  std::optional<int64_t> Judge(const HeardSpeech& heard, const DecodeLoad& load);

 private:
  bool interim_results_;
  int64_t interval_samples_;
  int64_t pause_samples_;        // 0: no pause partials
  int64_t start_delay_samples_;  // -1: no start partial
  int64_t gap_min_samples_;
  int64_t last_partial_sample_ = 0;  // `samples` when the latest partial was due
  int64_t last_partial_end_ = 0;     // end of the audio the latest partial covered
  int64_t paused_partial_at_ = -1;   // the pause (its silence_since) that had its partial
  int64_t start_partial_at_ = -1;    // when the utterance's start partial is due; -1: none
};

}  // namespace waav::streaming
