// The engine's session output (engine/streaming/stream_types.h) as waav.v1 messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/streaming/stream_types.h"
#include "waav/v1/recognizer.pb.h"

namespace waav::server {

// Stream time in ms as the API's uint32 (negative values, which the engine never produces,
// become 0; beyond 49 days saturates).
uint32_t ToApiMs(int64_t ms);

// A final's end reason: END_OF_AUDIO becomes STREAM_LIMIT when the server ended the audio at
// its maximum stream duration. Interim results have UNSPECIFIED.
v1::UtteranceEndReason ToProtoEndReason(const streaming::RecognitionResult& result,
                                        bool stream_limit_reached);

// Fills `out` from `result`: the whole transcript as the one alternative, stability,
// stable_transcript, offsets, words (the engine fills them only when asked), language and the
// engine's latency steps. server_ms and processing_ms are left for the sender, which knows when
// the response is handed to gRPC.
void FillResult(const streaming::RecognitionResult& result, const std::string& language,
                bool stream_limit_reached, v1::StreamingRecognitionResult* out);

// The final result of an utterance for which the engine produced none (the speech turned out
// to hold no words) after interim results were sent: the stable part of the last interim
// result, which the API promises every later result starts with (empty if nothing was stable).
void FinalFromLastInterim(const v1::StreamingRecognitionResult& last_interim,
                          v1::StreamingRecognitionResult* out);

// Keeps the API's promise that a stable word keeps its text, offsets and confidence in every
// later interim result of its utterance (the engine re-estimates interim word times as the
// utterance grows), and its text and confidence in the final, whose offsets are aligned to the
// audio and replace the estimates: words of `result` that match, in order, the words in
// `stable` get the values first reported; then `stable` becomes the result's stable words.
// Clear `stable` between utterances.
void KeepStableWords(v1::StreamingRecognitionResult* result, std::vector<v1::WordInfo>* stable);

void FillSpeechEvent(v1::SpeechEvent::Type type, int utterance_index, int64_t offset_ms,
                     int64_t detected_at_ms, v1::SpeechEvent* out);

}  // namespace waav::server
