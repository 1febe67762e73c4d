#include "server/stream_responses.h"

#include <algorithm>
#include <limits>

namespace waav::server {

uint32_t ToApiMs(int64_t ms) {
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, std::numeric_limits<uint32_t>::max()));
}

v1::UtteranceEndReason ToProtoEndReason(const streaming::RecognitionResult& result,
                                        bool stream_limit_reached) {
  if (!result.is_final) return v1::UTTERANCE_END_REASON_UNSPECIFIED;
  switch (result.end_reason) {
    case streaming::EndReason::kSilence:
      return v1::UTTERANCE_END_REASON_SILENCE;
    case streaming::EndReason::kMaxLength:
      return v1::UTTERANCE_END_REASON_MAX_LENGTH;
    case streaming::EndReason::kEndOfAudio:
      return stream_limit_reached ? v1::UTTERANCE_END_REASON_STREAM_LIMIT
                                  : v1::UTTERANCE_END_REASON_END_OF_AUDIO;
  }
  return v1::UTTERANCE_END_REASON_UNSPECIFIED;
}

void FillResult(const streaming::RecognitionResult& result, const std::string& language,
                bool stream_limit_reached, v1::StreamingRecognitionResult* out) {
  out->set_utterance_index(static_cast<uint32_t>(std::max(0, result.utterance_index)));
  out->set_is_final(result.is_final);
  v1::SpeechRecognitionAlternative* alternative = out->add_alternatives();
  alternative->set_transcript(result.transcript);
  // The API defines confidence on final results only.
  alternative->set_confidence(result.is_final ? result.confidence : 0.0f);
  for (const streaming::WordResult& w : result.words) {
    v1::WordInfo* word = alternative->add_words();
    word->set_word(w.word);
    word->set_start_ms(ToApiMs(w.start_ms));
    word->set_end_ms(std::max(ToApiMs(w.end_ms), ToApiMs(w.start_ms)));
    word->set_confidence(w.confidence);
    word->set_stable(result.is_final || w.stable);
  }
  out->set_stability(result.is_final ? 1.0f : result.stability);
  out->set_stable_transcript(result.is_final ? result.transcript : result.stable_transcript);
  out->set_start_ms(ToApiMs(result.start_ms));
  out->set_end_ms(ToApiMs(result.end_ms));
  out->set_end_reason(ToProtoEndReason(result, stream_limit_reached));
  out->set_language(language);
  v1::ResultLatency* latency = out->mutable_latency();
  latency->set_audio_to_result_ms(static_cast<float>(result.latency.audio_to_result_ms));
  latency->set_ingest_wait_ms(static_cast<float>(result.latency.ingest_wait_ms));
  latency->set_frontend_ms(static_cast<float>(result.latency.frontend_ms));
  latency->set_queue_ms(static_cast<float>(result.latency.queue_ms));
  latency->set_encoder_ms(static_cast<float>(result.latency.encoder_ms));
  latency->set_decoder_ms(static_cast<float>(result.latency.decoder_ms));
  latency->set_decoder_steps(static_cast<uint32_t>(std::max(0, result.latency.decoder_steps)));
  latency->set_batch_size(static_cast<uint32_t>(std::max(1, result.latency.batch_size)));
}

void FinalFromLastInterim(const v1::StreamingRecognitionResult& last_interim,
                          v1::StreamingRecognitionResult* out) {
  *out = last_interim;
  out->set_is_final(true);
  out->set_stability(1.0f);
  out->set_end_reason(v1::UTTERANCE_END_REASON_SILENCE);
  v1::SpeechRecognitionAlternative* alternative = out->mutable_alternatives(0);
  alternative->set_transcript(last_interim.stable_transcript());
  alternative->clear_words();
  for (const v1::WordInfo& word : last_interim.alternatives(0).words()) {
    if (word.stable()) *alternative->add_words() = word;
  }
  out->mutable_latency()->Clear();
}

void KeepStableWords(v1::StreamingRecognitionResult* result, std::vector<v1::WordInfo>* stable) {
  auto* words = result->mutable_alternatives(0)->mutable_words();
  const size_t n = std::min(stable->size(), static_cast<size_t>(words->size()));
  size_t kept = 0;
  for (; kept < n; ++kept) {
    v1::WordInfo& word = *words->Mutable(static_cast<int>(kept));
    const v1::WordInfo& was = (*stable)[kept];
    if (word.word() != was.word()) break;  // not the same word: nothing to keep from here on
    // A final's offsets come from aligning its words to the audio; interim ones are estimates
    // that the final replaces.
    if (!result->is_final()) {
      word.set_start_ms(was.start_ms());
      word.set_end_ms(was.end_ms());
    }
    word.set_confidence(was.confidence());
    word.set_stable(true);
  }
  // A word after the kept ones never starts before the last of them ends.
  if (kept > 0 && !result->is_final()) {
    const uint32_t floor_ms = (*stable)[kept - 1].end_ms();
    for (int i = static_cast<int>(kept); i < words->size(); ++i) {
      v1::WordInfo& word = *words->Mutable(i);
      word.set_start_ms(std::max(word.start_ms(), floor_ms));
      word.set_end_ms(std::max(word.end_ms(), word.start_ms()));
    }
  }
  stable->clear();
  for (const v1::WordInfo& word : *words) {
    if (!word.stable()) break;
    stable->push_back(word);
  }
}

void FillSpeechEvent(v1::SpeechEvent::Type type, int utterance_index, int64_t offset_ms,
                     int64_t detected_at_ms, v1::SpeechEvent* out) {
  out->set_type(type);
  out->set_utterance_index(static_cast<uint32_t>(std::max(0, utterance_index)));
  out->set_offset_ms(ToApiMs(offset_ms));
  out->set_detected_at_ms(std::max(ToApiMs(detected_at_ms), ToApiMs(offset_ms)));
}

}  // namespace waav::server
