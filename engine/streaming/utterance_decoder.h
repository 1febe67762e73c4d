// The Whisper streaming policy for one stream: re-decode the growing utterance, commit what two
// consecutive hypotheses agree on (LocalAgreement-2), force the committed tokens as the decoder's
// prefix so they are never withdrawn, and finalise at the endpoint. Previous utterances' text
// prompts the next one, as in Whisper's long-form transcription.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/streaming/local_agreement.h"
#include "engine/streaming/stream_types.h"

namespace waav::streaming {

// Shared by every stream the scheduler serves; used from the scheduler thread only.
struct DecodeContext {
  const whisper::Transcriber* transcriber = nullptr;
  whisper::DecoderState* state = nullptr;  // batch 1, reused across streams
  const frontend::LogMel* log_mel = nullptr;
};

class UtteranceDecoder {
 public:
  UtteranceDecoder(const whisper::Vocabulary& vocabulary, const StreamOptions& options);

  // Decodes `audio` (16 kHz, the utterance from its padded start) and returns the result to send.
  // `start_ms` is the audio's position in the stream. A final result closes the utterance and
  // moves its text into the context for the next one. Returns std::nullopt-like empty transcript
  // results as they are; the caller decides what to send.
  absl::StatusOr<RecognitionResult> Decode(const DecodeContext& context,
                                           absl::Span<const float> audio, int64_t start_ms,
                                           bool is_final, EndReason end_reason);

  int utterance_index() const { return utterance_index_; }

 private:
  std::string TextOf(const std::vector<int>& tokens) const;
  void FillWords(const std::vector<int>& tokens, const std::vector<float>& logprobs,
                 size_t stable_tokens, int64_t start_ms, int64_t end_ms,
                 RecognitionResult* result) const;
  bool StartsWord(int token) const;

  const whisper::Vocabulary& vocabulary_;
  StreamOptions options_;
  LocalAgreement agreement_;
  std::vector<float> committed_logprobs_;  // parallel to agreement_.committed()
  std::vector<int> context_;               // text tokens of earlier utterances (and the prompt)
  int utterance_index_ = 0;
};

}  // namespace waav::streaming
