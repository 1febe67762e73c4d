// A test client for waav.v1.Recognizer/StreamingRecognize: sends a config and audio at a chosen
// pace from one thread while reading responses on another, and records, for each response, how
// much audio had been sent when it arrived. Plus the checks every well-formed stream must pass
// (proto/README.md's guarantees).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tests/support/text_compare.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::testing {

struct StreamPlan {
  v1::StreamingRecognitionConfig config;
  bool send_config = true;
  // Encoded audio, sent in `chunk_bytes` pieces.
  std::string audio;
  size_t chunk_bytes = 3200;
  // Bytes per millisecond of audio (LINEAR16 at 16 kHz mono: 32), for pacing and bookkeeping.
  double bytes_per_ms = 32;
  // 1: real time; 4: four times faster; 0: as fast as the server takes it.
  double pace = 0;
  bool half_close = true;
  // Cancel the call once this much audio (ms) has been sent.
  std::optional<double> cancel_after_ms;
  // Per-call deadline.
  int deadline_s = 120;
};

struct Received {
  v1::StreamingRecognizeResponse response;
  double sent_ms = 0;  // audio the client had sent when the response arrived
};

struct StreamRun {
  grpc::Status status;
  std::vector<Received> responses;
  double sent_ms = 0;

  std::vector<v1::StreamingRecognitionResult> Finals() const;
  // The finals' transcripts joined with spaces.
  std::string FinalText() const;
  int CountEvents(v1::SpeechEvent::Type type) const;
  int CountResults() const;
};

StreamRun RunStream(v1::Recognizer::Stub& stub, const StreamPlan& plan);

// A config for LINEAR16 mono at `rate_hz`, with word offsets and `request_id`.
v1::StreamingRecognitionConfig Linear16Config(int rate_hz, const std::string& request_id = "");

// Float samples in [-1, 1] as LINEAR16 little-endian bytes.
std::string ToLinear16(const std::vector<float>& samples);

// NormalizeText, WordEditDistance and MissedWords: tests/support/text_compare.h.

// Every guarantee of proto/README.md a response sequence must satisfy: StreamStarted first and
// once; the request id in every response; processed_audio_ms never decreasing; per utterance,
// stable text never withdrawn or shortened and a prefix of its transcript, SPEECH_ENDED before
// the final, exactly one final, nothing about a later utterance before it; events alternating.
// Returns "" when all hold, otherwise what was violated.
std::string CheckStreamContract(const StreamRun& run, const std::string& request_id);

}  // namespace waav::testing
