// waav-load's runs: N concurrent streams (one step), and ramps of steps with the keep-up verdict.
//
// A step runs N slots at once. Each slot opens a stream, streams one file through it (files are
// assigned round robin), and when that stream ends opens the next, until it has run
// `repetitions` streams or, with `duration_s`, until that much time has passed since the step
// began (a stream is never cut short). Slot i starts i * stagger_ms (or i * spread_ms / N) after
// the step begins. One
// pacer thread wakes streams when their chunks are due; gRPC's callback threads do the rest.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "load-tests/latency_stats.h"
#include "load-tests/load_stream.h"
#include "load-tests/reference_words.h"
#include "load-tests/stream_record.h"
#include "tools/waav/client_audio.h"

namespace waav::load {

// When a step "keeps up" (docs/client.md): all of these hold.
struct KeepUpCriteria {
  // Every final result arrives within this long after the end of its utterance's speech
  // (final end_ms), at real-time pace. Default 2000: the default endpoint silence (500 ms) plus
  // 1.5 s for decoding and queueing.
  double max_final_ms = 2000;
  // The server's backlog (audio sent minus processed_audio_ms, at each response) stays within
  // this. Default 1000.
  double max_backlog_ms = 1000;
  // No chunk is written later than this after it was due (client behind, or flow control).
  // Default 1000.
  double max_send_delay_ms = 1000;
  // If > 0: the p99 first-partial latency must be within this too. Default 0 (not checked).
  double max_first_partial_p99_ms = 0;
};

struct LoadOptions {
  std::string server;
  std::vector<std::string> files;
  cli::ClientAudioOptions audio;  // encoding, chunk_ms, tail silence
  StreamSettings stream;          // pace, interim, words, model ...
  int repetitions = 1;            // streams per slot (when duration_s is 0)
  double duration_s = 0;          // > 0: slots open streams until this much time has passed
  double stagger_ms = 0;          // delay between slot starts
  // > 0: instead of stagger_ms, the slots' starts are spread evenly over this long (slot i
  // starts at i * spread_ms / N), so every step of a ramp reaches full load at the same time.
  double spread_ms = 0;
  // 0: one connection per slot (as separate users would have); otherwise this many connections
  // shared round robin.
  int connections = 0;
  uint32_t match_slack_ms = 500;  // word matching between interim and final results
  // When not empty: each streamed file's words from a reference transcription, to measure word
  // latencies from (AnalyzeStream); every file streamed must have its words here.
  ReferenceWords reference_words;
  std::string reference_words_path;  // where they came from, for the report
  KeepUpCriteria criteria;
};

// With reference words: one reference word's latencies over the step's streams of its file, to
// tell which words make the tail (docs/client.md, "Which words are late").
struct ReferenceWordReport {
  std::string file;  // the file's name (its last path component)
  size_t index = 0;  // the word's place in the file's reference words
  std::string text;
  uint32_t end_ms = 0;
  size_t measured = 0;              // final words matched to it (at most one per stream)
  size_t first_shown_by_final = 0;  // of those, the ones no interim result showed first
  Summary first_partial_ms;
  Summary final_ms;
};

// One step, aggregated.
struct StepReport {
  int concurrency = 0;
  int streams = 0;
  int streams_ok = 0;
  std::map<std::string, int> errors;                // status code name -> streams
  std::map<std::string, std::string> error_sample;  // status code name -> one message
  int streams_word_reference = 0;                   // streams measured at word ends
  int streams_utterance_reference = 0;  // streams measured at utterance ends (no word offsets)
  // With reference words: final words measured from their reference word, and left out.
  size_t reference_matched = 0;
  size_t reference_unmatched = 0;
  size_t finals = 0;
  size_t words = 0;
  Summary first_partial_ms;
  Summary first_stable_ms;  // word-end reference only: when each word became stable
  Summary final_ms;
  Summary utterance_final_ms;  // per final: arrival minus its end_ms
  Summary rtf;                 // per stream
  Summary backlog_ms;          // per stream: its largest backlog
  Summary send_delay_ms;       // per stream: its largest send delay
  // With reference words: every reference word of the files streamed, by file then index.
  std::vector<ReferenceWordReport> reference_words;
  // The server's ResultLatency over all results: "audio_to_result (interim)",
  // "audio_to_result (final)", "server", "ingest_wait", "frontend", "queue", "encoder",
  // "decoder", "processing", "batch_size" (a count, not ms).
  std::map<std::string, Summary> server_stages;
  double audio_s = 0;  // audio streamed, all streams
  double wall_s = 0;   // the step's duration
  bool paced = true;   // false: no pacing, latencies and the verdict do not apply
  bool keeps_up = false;
  std::vector<std::string> failures;  // why it does not keep up
};

// Aggregates a step's streams and judges it against `options.criteria`.
StepReport Aggregate(int concurrency, const std::vector<StreamRecord>& records,
                     const LoadOptions& options, double wall_s);

// Reads and prepares every file (InvalidArgument/NotFound naming the file when one fails).
absl::StatusOr<std::vector<std::shared_ptr<const cli::ClientAudio>>> LoadFiles(
    const LoadOptions& options);

// Runs one step of `concurrency` slots and returns every stream's record, in start order.
std::vector<StreamRecord> RunStep(const LoadOptions& options,
                                  const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                                  int concurrency, double* wall_s);

struct RampReport {
  std::vector<StepReport> steps;
  int largest_keeping_up = 0;  // 0: no step kept up
};

// Runs a step per value of `concurrencies` (in order), pausing `settle_s` between steps; stops
// after the first step that does not keep up unless `keep_going`. `on_step` (optional) sees each
// step as it ends.
RampReport RunRamp(const LoadOptions& options,
                   const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                   const std::vector<int>& concurrencies, bool keep_going, double settle_s,
                   const std::function<void(const StepReport&)>& on_step);

// "1,2,4,8" -> {1, 2, 4, 8}: positive, strictly increasing, at most 20 values, each <= 100000.
absl::StatusOr<std::vector<int>> ParseRamp(const std::string& text);

}  // namespace waav::load
