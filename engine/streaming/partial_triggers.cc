#include "engine/streaming/partial_triggers.h"

#include <algorithm>

namespace waav::streaming {
namespace {

int64_t MsToSamples(int ms) { return static_cast<int64_t>(ms) * Endpointer::kSampleRateHz / 1000; }

}  // namespace

PartialTriggers::PartialTriggers(const StreamOptions& options)
    : interim_results_(options.interim_results),
      interval_samples_(MsToSamples(options.partial_interval_ms)),
      pause_samples_(MsToSamples(options.pause_partial_ms)),
      start_delay_samples_(options.start_partial_ms >= 0 ? MsToSamples(options.start_partial_ms)
                                                         : -1),
      gap_min_samples_(MsToSamples(options.gap_partial_min_ms)) {}

void PartialTriggers::UtteranceStarted(int64_t heard) {
  last_partial_sample_ = heard;
  last_partial_end_ = 0;
  if (start_delay_samples_ >= 0) start_partial_at_ = heard + start_delay_samples_;
}

std::optional<int64_t> PartialTriggers::Judge(const HeardSpeech& heard, const DecodeLoad& load) {
  // A pause: what was said before it is decoded at once (the words a speaker stops on would
  // otherwise wait for the interval, or for the final when the pause is the endpoint). It
  // covers the speech heard so far, so the interval decodes nothing more until speech resumes.
  const int64_t pause = heard.silence_since;
  if (pause >= 0 && interim_results_ && pause_samples_ > 0 && pause != paused_partial_at_ &&
      heard.samples - pause >= pause_samples_) {
    paused_partial_at_ = pause;
    const int64_t end = std::min(heard.samples, heard.padded_speech_end);
    if (end <= last_partial_end_ || load.scheduler_behind || load.stream_decoding) {
      return std::nullopt;
    }
    last_partial_sample_ = heard.samples;
    // The whole padded end, even where it runs past the audio heard: the padding that arrives
    // next is silence, not worth a decode of its own.
    last_partial_end_ = heard.padded_speech_end;
    return end;
  }
  if (!heard.in_speech || !interim_results_) return std::nullopt;
  const bool start_due = start_partial_at_ >= 0 && heard.samples >= start_partial_at_;
  const int64_t since_partial = heard.samples - last_partial_sample_;
  const bool after_gap =
      heard.word_gap && since_partial >= gap_min_samples_ && !load.stream_decoding;
  if (!start_due && !after_gap && since_partial < interval_samples_) return std::nullopt;
  last_partial_sample_ = heard.samples;
  start_partial_at_ = -1;
  const int64_t end = std::min(heard.samples, heard.padded_speech_end);
  if (end <= last_partial_end_) return std::nullopt;
  last_partial_end_ = end;
  return end;
}

}  // namespace waav::streaming
