// The Whisper streaming policy for one stream: re-decode the growing utterance, commit what two
// consecutive hypotheses agree on (LocalAgreement-2), force the committed tokens as the decoder's
// prefix so they are never withdrawn, and finalise at the endpoint. Previous utterances' text
// prompts the next one, as in Whisper's long-form transcription.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/frontend/growing_log_mel.h"
#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/models/whisper/word_alignment.h"
#include "engine/streaming/local_agreement.h"
#include "engine/streaming/stream_types.h"

namespace waav::streaming {

// One utterance window ready for the model.
struct UtteranceInput {
  // Log-mel, time-major [frames, n_mels], frames <= n_frames: the window's frames that hold
  // audio; the rest of the window is zero, written as the window is staged
  // (WhisperModel::StageMel), not here: a 30 s window is 960 KB a row.
  std::vector<float> mel;
  std::vector<int> prompt;      // the decoder prompt (see UtteranceDecoder::Prepare)
  size_t committed_tokens = 0;  // the prompt's last tokens that are the committed prefix
};

// A stream's decoding policy. The model work is the caller's, so that the scheduler can batch
// the windows of many streams: Prepare(), then the encoder and greedy decoding of the window
// with the prompt, then Finish() with the decoded tokens. Used from one thread at a time.
class UtteranceDecoder {
 public:
  UtteranceDecoder(const whisper::Vocabulary& vocabulary, const StreamOptions& options);

  // The log-mel window of `audio` (16 kHz, the utterance from its padded start at `start_ms` of
  // the stream; `n_frames` mel frames per window) and the prompt: earlier utterances' text, the
  // task, text only, then what is already committed as the forced prefix. The window's frames
  // are kept from one call to the next of the same utterance and start (the partials' audio
  // grows), so each call computes only the new ones (frontend::GrowingLogMel; the same values
  // as computing them all).
  absl::StatusOr<UtteranceInput> Prepare(const frontend::LogMel& log_mel, int n_frames,
                                         absl::Span<const float> audio, int64_t start_ms) const;

  // The result to send for the window last prepared, given its decoded tokens. `start_ms` is
  // the audio's position in the stream, `audio_samples` its length. A final result closes the
  // utterance and moves its text into the context for the next one. Results with an empty
  // transcript are returned as they are; the caller decides what to send. Latency fields other
  // than decoder_steps are the caller's.
  //
  // Word times: a final result with word time offsets requested takes them from `align_words`
  // when given (the cross-attention alignment of the final's text tokens over its window, see
  // whisper::WordAligner; times relative to the window's start); partial results, and finals
  // without it or when it fails, get times estimated by spreading the utterance over the words'
  // characters.
  using AlignWordsFn = std::function<absl::StatusOr<std::vector<whisper::TimedWord>>(
      const std::vector<int>& text_tokens)>;
  RecognitionResult Finish(const whisper::GreedyResult& decoded, int64_t start_ms,
                           size_t audio_samples, bool is_final, EndReason end_reason,
                           const AlignWordsFn& align_words = nullptr);

  // The text tokens a final's word alignment times: what Finish(decoded, ..., is_final = true,
  // ...) would pass to align_words (the committed tokens and, unless the window is judged
  // silent, the decoded ones; special tokens left out), so that a caller can align several
  // finals at once before finishing them. Empty when there is no text.
  std::vector<int> FinalTextTokens(const whisper::GreedyResult& decoded) const;

  // Whether finals of this stream carry aligned word times (word time offsets requested).
  bool wants_word_times() const { return options_.word_time_offsets; }

  int utterance_index() const { return utterance_index_; }

 private:
  std::string TextOf(const std::vector<int>& tokens) const;
  void FillWords(const std::vector<int>& tokens, const std::vector<float>& logprobs,
                 size_t stable_tokens, int64_t start_ms, int64_t end_ms,
                 RecognitionResult* result) const;
  // Words from the alignment; false (nothing filled) when it failed or does not fit `tokens`.
  bool FillAlignedWords(const std::vector<int>& tokens, const std::vector<float>& logprobs,
                        int64_t start_ms, int64_t end_ms, const AlignWordsFn& align_words,
                        RecognitionResult* result) const;
  bool StartsWord(int token) const;
  // How many of `decoded`'s tokens a result takes: all but trailing words of their own with no
  // letter or digit (" ...", " -"): Whisper adds them over the silence after speech, above all
  // once the forced prefix holds the whole utterance, and no one said them.
  size_t SpokenTokens(const std::vector<int>& decoded) const;
  // How many of a partial's `decoded` tokens come before the utterance's words (committed, then
  // decoded) start over: Whisper on a short window (EngineOptions::partial_window_ms) sometimes
  // says the audio's words, then says them again from the first ("in being comparatively
  // modern in being comparatively modern"). A restart is a run of at least two words that, from
  // word p >= 2 on to the end, repeats the words from the first on, or of at least four that
  // repeats them from the second or third on (RestartStart; words compared without case or
  // punctuation); the partial keeps what comes before it. Finals are not cut.
  size_t BeforeRestart(const std::vector<int>& decoded) const;
  // How many of a final's decoded tokens it takes: SpokenTokens, less, where partials had
  // committed words, its trailing words whose tokens average a log-probability below -1
  // (Whisper's log_prob_threshold). A final whose forced prefix already holds the utterance,
  // above all one whose audio ends on its last word, tends to go on with a word nobody said
  // (jfk.wav's "... for your country. Aah!").
  size_t FinalTokens(const whisper::GreedyResult& decoded) const;

  const whisper::Vocabulary& vocabulary_;
  StreamOptions options_;
  LocalAgreement agreement_;
  std::vector<float> committed_logprobs_;  // parallel to agreement_.committed()
  std::vector<int> context_;               // text tokens of earlier utterances (and the prompt)
  int utterance_index_ = 0;
  // The log-mel frames of the utterance's audio so far (Prepare; mutable: a cache of its input).
  mutable frontend::GrowingLogMel mel_;
};

}  // namespace waav::streaming
