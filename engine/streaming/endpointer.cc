#include "engine/streaming/endpointer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace waav::streaming {

absl::Status EndpointConfig::Validate() const {
  if (!(threshold > 0.0f && threshold < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAD threshold must be in (0, 1); got ", threshold));
  }
  if (!(hysteresis >= 0.0f && hysteresis < threshold)) {
    return absl::InvalidArgumentError(absl::StrCat("VAD hysteresis must be in [0, threshold); got ",
                                                   hysteresis, " for threshold ", threshold));
  }
  if (min_speech_ms < 0 || min_speech_ms > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_speech_ms must be in [0, 10000]; got ", min_speech_ms));
  }
  if (silence_ms < 100 || silence_ms > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint silence must be in [100, 10000] ms; got ", silence_ms));
  }
  if (max_utterance_ms < 1000 || max_utterance_ms > 30000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max utterance length must be in [1000, 30000] ms (one Whisper window); got ",
                     max_utterance_ms));
  }
  if (speech_pad_ms < 0 || speech_pad_ms > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("speech padding must be in [0, 1000] ms; got ", speech_pad_ms));
  }
  if (cold_start_pad_ms < 0 || cold_start_pad_ms > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("cold start padding must be in [0, 1000] ms; got ", cold_start_pad_ms));
  }
  if (cold_after_ms < 0 || cold_after_ms > 3600000) {
    return absl::InvalidArgumentError(
        absl::StrCat("cold_after_ms must be in [0, 3600000]; got ", cold_after_ms));
  }
  return absl::OkStatus();
}

Endpointer::Endpointer(const EndpointConfig& config) : config_(config) {}

Endpointer::Update Endpointer::Push(float probability, int64_t frame_start, int frame_samples) {
  Update update;
  const int64_t frame_end = frame_start + frame_samples;
  const bool speech = probability >= config_.threshold;
  const bool silence = probability < config_.threshold - config_.hysteresis;
  switch (state_) {
    case State::kSilence:
      if (speech) {
        state_ = State::kMaybeSpeech;
        candidate_start_ = frame_start;
        last_speech_end_ = frame_end;
      } else {
        break;
      }
      [[fallthrough]];
    case State::kMaybeSpeech:
      if (silence) {
        state_ = State::kSilence;  // too short to count
        break;
      }
      if (speech) last_speech_end_ = frame_end;
      if (frame_end - candidate_start_ >= Ms(config_.min_speech_ms)) {
        state_ = State::kSpeech;
        const bool cold =
            !started_before_ || candidate_start_ - previous_end_ >= Ms(config_.cold_after_ms);
        utterance_start_ = std::max(
            start_floor_,
            candidate_start_ - Ms(cold ? config_.cold_start_pad_ms : config_.speech_pad_ms));
        started_before_ = true;
        silence_since_ = -1;
        update.started = UtteranceStart{utterance_start_, frame_end};
      }
      break;
    case State::kSpeech:
      if (speech) {
        last_speech_end_ = frame_end;
        silence_since_ = -1;
      } else if (silence && silence_since_ < 0) {
        silence_since_ = frame_start;
      }
      if (silence_since_ >= 0 && frame_end - silence_since_ >= Ms(config_.silence_ms)) {
        state_ = State::kSilence;
        update.ended =
            UtteranceEnd{std::min(frame_end, last_speech_end_ + Ms(config_.speech_pad_ms)),
                         frame_end, EndReason::kSilence};
        start_floor_ = update.ended->end_sample;
        previous_end_ = update.ended->end_sample;
      } else if (frame_end - utterance_start_ >= Ms(config_.max_utterance_ms)) {
        // Cut here; speech that goes on starts the next utterance at once, reaching back over
        // the cut by the end's padding (a word there is heard by both).
        state_ = speech ? State::kMaybeSpeech : State::kSilence;
        candidate_start_ = frame_end;
        start_floor_ = std::max<int64_t>(0, frame_end - Ms(config_.speech_pad_ms));
        previous_end_ = frame_end;
        update.ended = UtteranceEnd{frame_end, frame_end, EndReason::kMaxLength};
      }
      break;
  }
  return update;
}

std::optional<UtteranceEnd> Endpointer::Finish(int64_t stream_end_sample) {
  const bool open = state_ == State::kSpeech;
  state_ = State::kSilence;
  if (!open) return std::nullopt;
  // A pause shorter than the endpoint may be trailing the speech: leave it out, as a silence
  // endpoint would (Whisper asked to transcribe a long silence may invent words for it).
  const int64_t end = std::min(stream_end_sample, last_speech_end_ + Ms(config_.speech_pad_ms));
  return UtteranceEnd{end, stream_end_sample, EndReason::kEndOfAudio};
}

}  // namespace waav::streaming
