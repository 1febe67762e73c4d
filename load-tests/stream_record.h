// What one waav-load stream observed, and the latencies computed from it.
//
// Clock. Every time here is on the client's steady clock, in seconds since the stream's audio
// clock started (t0: the moment the call was started and the config written). With pacing at
// `speed` times real time, the chunk whose audio ends at stream time T ms is due at
// t0 + T / 1000 / speed, and stream time T is "spoken" at that same moment. The latency of
// anything about stream time T is therefore  received_s - T / 1000 / speed : it includes the
// client's chunking (a word's end waits for the rest of its chunk, as with a microphone that
// delivers chunk_ms at a time), the network, and the server's waiting and work.
//
// Reference points (docs/client.md has the full definitions):
// - word ends (preferred): each word of each final result, with its end_ms from the server's
//   word time offsets. Final latency: the final result's arrival minus the word's end. First
//   partial latency: the arrival of the earliest result of the same utterance (interim or the
//   final) holding a word with the same normalised text whose end_ms is within the match slack
//   of the final word's end_ms.
// - utterance ends (when the server sent no word offsets): one point per final result, its
//   utterance's SPEECH_ENDED offset_ms (the final's end_ms if no event came). Final latency: the
//   final's arrival minus that end. First partial latency: the arrival of the earliest result of
//   the utterance whose end_ms reaches that end.
// Latencies may be negative when a word is reported before its end was sent (its end time is
// the server's estimate); they are kept, not clamped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/support/status.h"
#include "waav/v1/recognizer.pb.h"

namespace waav::load {

struct ObservedWord {
  std::string text;  // NormalizeWord of the word
  uint32_t end_ms = 0;
  bool stable = false;  // part of the result's stable prefix (always, in a final)
};

struct ObservedResult {
  double received_s = 0;
  uint32_t utterance = 0;
  bool is_final = false;
  uint32_t end_ms = 0;  // stream time decoded up to; for a final, the end of its speech
  bool has_text = false;
  std::vector<ObservedWord> words;  // empty when the server sent no word offsets
  v1::ResultLatency latency;        // the server's own account
};

struct ObservedEvent {
  double received_s = 0;
  v1::SpeechEvent::Type type = v1::SpeechEvent::TYPE_UNSPECIFIED;
  uint32_t utterance = 0;
  uint32_t offset_ms = 0;
};

struct StreamRecord {
  std::string file;
  std::string request_id;
  int slot = 0;              // which of the N concurrent slots ran it
  double speed = 1;          // pace, multiple of real time; 0: as fast as possible
  int64_t audio_us = 0;      // stream time of all the audio sent
  double started_s = 0;      // t0, in seconds since the step began
  bool got_started = false;  // StreamStarted arrived
  std::vector<ObservedResult> results;
  std::vector<ObservedEvent> events;
  // Largest backlog seen: audio handed to gRPC by the time a response arrived, minus that
  // response's processed_audio_ms (ms of stream time).
  double max_backlog_ms = 0;
  // Largest delay of a chunk's write past its due time (ms): the client fell behind, or the
  // server's flow control held the writes back.
  double max_send_delay_ms = 0;
  uint32_t last_processed_ms = 0;
  double done_s = 0;  // arrival of the final status
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;  // the status message when not OK
};

// Lower-case ASCII letters, digits and inner apostrophes; other characters dropped ("Hello," ->
// "hello"). A word with nothing left is kept lower-cased as it was, so it still matches itself.
std::string NormalizeWord(const std::string& word);

enum class Reference { kWordEnds, kUtteranceEnds };

struct StreamLatencies {
  Reference reference = Reference::kUtteranceEnds;
  std::vector<double> first_partial_ms;  // one per word (kWordEnds) or per final (kUtteranceEnds)
  // kWordEnds only: the earliest result (the final at the latest) in which the word is marked
  // stable, i.e. committed by the server's streaming policy and never to change.
  std::vector<double> first_stable_ms;
  std::vector<double> final_ms;  // same points
  // kWordEnds only, one per point: whether the final was the first result to show the word (no
  // interim result of its utterance had it), and, when measured from a reference, the index of
  // the word's reference word (docs/client.md: "Which words are late").
  std::vector<bool> first_shown_by_final;
  std::vector<size_t> reference_index;
  // Per final result: its arrival minus its end_ms (the keep-up criterion's measure).
  std::vector<double> utterance_final_ms;
  size_t finals = 0;
  size_t words = 0;
  // With reference words: final words measured from a reference word, and those without one
  // (not measured: a word the reference does not have near that time).
  size_t reference_matched = 0;
  size_t reference_unmatched = 0;
};

// Computes the latencies of one stream (see the top of this file). For speed <= 0 (no pacing)
// stream time does not map to wall time: the latency lists stay empty and only counts are set.
// A stream is in kWordEnds mode when any of its final results carries words.
//
// `reference`, when given (the stream's file's words from a reference transcription:
// reference_words.h), replaces each final word's end time by its reference word's: the first
// reference word of the same text after the last one taken that ends within 2 s of the server's
// end time. A final word without one is left out of the latencies (counted in
// reference_unmatched). Matching interim words to final words still uses the server's times.
struct ReferenceWord;
StreamLatencies AnalyzeStream(const StreamRecord& record, uint32_t match_slack_ms,
                              const std::vector<ReferenceWord>* reference = nullptr);

// Wall time from t0 to the final status over the audio's duration: about 1 / speed plus the
// tail after the last audio for a paced stream; the throughput-bound processing speed without
// pacing. 0 when there was no audio.
double StreamRtf(const StreamRecord& record);

// Builds an ObservedResult from a response (words normalised).
ObservedResult ObserveResult(const v1::StreamingRecognitionResult& result, double received_s);

}  // namespace waav::load
