// What a streaming recognition session asks for and what it gets back, independent of gRPC.
// The server maps these to and from waav.v1 messages; times are milliseconds of stream audio.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/streaming/endpointer.h"

namespace waav::streaming {

struct StreamOptions {
  EndpointConfig endpoint;
  // Send partial results while an utterance is being spoken. Default: true.
  bool interim_results = true;
  // End the session after the first utterance's final result. Default: false.
  bool single_utterance = false;
  // Decode a new partial once this much speech has arrived since the last one. Default: 500 ms.
  int partial_interval_ms = 500;
  // Also decode a partial once speech has paused this long (silence below the endpoint's), so
  // that the words before a pause show at once instead of up to partial_interval_ms later; one
  // per pause, none when nothing new was said or while the scheduler is behind (its latest round
  // left streams waiting). 0: only the interval. Default: 32 ms (the first VAD frame judged
  // silence; docs/benchmarks.md, session 31).
  int pause_partial_ms = 32;
  // Also decode a partial right after a gap between words: a frame whose level drops this many
  // dB below the speech's recent peak (WordGapDetector, word_gaps.h), once gap_partial_min_ms
  // of speech has arrived since the last partial. The interval then counts from that partial,
  // so it is the fallback for speech without gaps. 0: off. Default: 0.
  int gap_partial_db = 0;
  // Also decode a partial this long after an utterance's start is detected (the VAD has heard
  // endpoint.min_speech_ms of speech by then, often a whole first word, which would otherwise
  // wait for the interval); the interval then counts from it. -1: none. Default: 0 (at once).
  int start_partial_ms = 0;
  int gap_partial_min_ms = 200;
  // An interim result commits (marks stable, and forces into every later result) no word while
  // its window holds less than this much of the utterance's audio: on the first few hundred ms
  // Whisper often mishears the first word, and two such early windows agreeing would commit it.
  // The hypothesis still counts as the one the next window must agree with. 0: no minimum.
  // Default: 1000 ms (docs/benchmarks.md, session 36).
  int commit_min_audio_ms = 1000;
  // Prompt each utterance with the text of the previous ones (Whisper's conditioning).
  // Default: true.
  bool condition_on_previous_text = true;
  // Text given to the decoder as if said before the stream began (names, jargon). Default: "".
  std::string initial_prompt;
  // Fill in words with times and confidences. Default: false.
  bool word_time_offsets = false;

  [[nodiscard]] absl::Status Validate() const;
};

struct WordResult {
  std::string word;      // without surrounding spaces
  int64_t start_ms = 0;  // finals: aligned; partials: estimated (docs/streaming.md)
  int64_t end_ms = 0;
  float confidence = 0;  // geometric mean of the word's token probabilities
  bool stable = false;   // committed: it will be in every later result of the utterance
};

// Where the time between an utterance's audio and its result went, for one result.
struct ResultLatency {
  double audio_to_result_ms = 0;  // end of the newest audio in the result -> result emitted
  double ingest_wait_ms = 0;      // audio published -> drained by the frontend worker
  double frontend_ms = 0;         // VAD and endpointing for the newest audio
  double queue_ms = 0;            // decode job queued -> picked up by the scheduler
  double encoder_ms = 0;          // log-mel + encoder
  double decoder_ms = 0;          // all decoder steps
  int decoder_steps = 0;
  int batch_size = 1;
  int encoder_positions = 0;  // the encoded window's (1500: 30 s; fewer: a short window)
};

struct RecognitionResult {
  int utterance_index = 0;
  bool is_final = false;
  std::string transcript;         // the whole utterance so far
  std::string stable_transcript;  // prefix of `transcript` that will not change
  float stability = 0;            // share of the words that are stable
  float confidence = 0;           // geometric mean of token probabilities
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  EndReason end_reason = EndReason::kSilence;  // finals only
  std::vector<WordResult> words;               // when word_time_offsets
  ResultLatency latency;
};

// Receives a session's output. Calls come from one engine thread at a time, in order: for each
// utterance, SpeechStarted, results (partials then exactly one final), SpeechEnded; then, after
// Finish() or an error, exactly one OnDone. Implementations must not block (queue and return).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual void OnSpeechStarted(int utterance_index, int64_t offset_ms, int64_t detected_at_ms) = 0;
  virtual void OnResult(const RecognitionResult& result) = 0;
  virtual void OnSpeechEnded(int utterance_index, int64_t offset_ms, int64_t detected_at_ms) = 0;
  // The session is over: OK after Finish() (or single_utterance), or the error that ended it.
  // `processed_audio_ms` is how much audio the engine consumed.
  virtual void OnDone(absl::Status status, int64_t processed_audio_ms) = 0;
};

}  // namespace waav::streaming
