// Words as the streaming policy compares them, and the watch that stops a partial's decoding once
// Whisper starts the utterance's words over.
#pragma once

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/models/whisper/transcriber.h"

namespace waav::streaming {

// Whether `token` begins a word: a special token, or a text token whose text begins with a
// space. Punctuation stays with the word before it ("Americans," is one word).
bool StartsWord(const whisper::Vocabulary& vocabulary, int token);

// A word's tokens as compared for repeats: its letters and digits in lower case (special tokens
// left out); empty for a word of punctuation alone.
std::string ComparedWord(const whisper::Vocabulary& vocabulary, absl::Span<const int> tokens);

// Whisper's restarts repeat the utterance's words from the first, or from the second or third
// where the window's first words were misheard and the restart says them right (LJ001-0005 on
// a short window: "in the invention of movable ... century. The invention of movable ..."). A
// restart that leaves out first words must run this many words or more to count: speech does
// repeat a few of an utterance's words ("... may be considered as the invention of the art").
inline constexpr size_t kRestartMaxSkippedWords = 2;
inline constexpr size_t kSkippingRestartMinWords = 4;

// Where `words`' restart begins (see above): the least p such that words[p..] repeats
// words[s..] for an s <= kRestartMaxSkippedWords, p >= s + 2, with at least `min_words` words
// (kSkippingRestartMinWords or more where s > 0); words.size() when there is none.
size_t RestartStart(const std::vector<std::string>& words, size_t min_words);

// Whisper on a window of the audio's length sometimes says the utterance's words, then says them
// again from the first ("in being comparatively modern in being comparatively modern"), and
// goes on until the repeat cut (GreedyOptions::max_repeats) or the length limit: a batch of
// partials runs as long as its longest row, so one such row holds up the others' steps. The
// watch reads a partial's sampled tokens as they come and says when the words restart with a
// run of `run_words` words, so that decoding stops there: the partial would cut that restart
// anyway (UtteranceDecoder::BeforeRestart: the words from word p >= 2 to the end repeat the
// utterance's words from the first, or from the second or third: RestartStart). Words are compared
// as ComparedWord; a word counts once the next word starts.
class RestartWatch {
 public:
  // `committed`: the forced prefix (the words committed before this window), which the restart
  // is measured from as BeforeRestart measures it. `run_words` >= 2.
  RestartWatch(const whisper::Vocabulary& vocabulary, absl::Span<const int> committed,
               int run_words);

  // Called with each sampled token before it is kept (<|endoftext|> aside). True when the words
  // before it restart with a run of `run_words` or more, at least one of them sampled: the row
  // should end there, without this token, so that its text ends on the run's last whole word.
  bool StopsBefore(int token);

 private:
  // Adds the word being read, if any, as a whole word; true when a run has reached run_words.
  bool CompletePendingWord();
  // Adds a whole word (its compared text); true when a run has reached run_words.
  bool AddWord(std::string word);

  const whisper::Vocabulary* vocabulary_;
  int run_words_;
  std::vector<std::string> words_;
  std::vector<int> pending_;  // the tokens of the word being read
  // A run of words from `start` on that repeats the utterance's words from `from` on:
  // words_[start..] == words_[from..], from <= kRestartMaxSkippedWords, start >= from + 2.
  struct Run {
    size_t start;
    size_t from;
  };
  std::vector<Run> runs_;
};

}  // namespace waav::streaming
