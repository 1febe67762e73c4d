// Whisper's special tokens and the token sets decoding suppresses, derived from the tokenizer.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/text/bpe_tokenizer.h"

namespace waav::whisper {

struct SpecialTokens {
  int eot = 0;              // <|endoftext|>
  int sot = 0;              // <|startoftranscript|>
  int translate = 0;        // <|translate|>
  int transcribe = 0;       // <|transcribe|>
  int sot_lm = 0;           // <|startoflm|>
  int sot_prev = 0;         // <|startofprev|>
  int no_speech = 0;        // <|nospeech|> (<|nocaptions|> in English-only models)
  int no_timestamps = 0;    // <|notimestamps|>
  int timestamp_begin = 0;  // <|0.00|>; timestamps run to the end of the vocabulary
  bool multilingual = false;
};

class Vocabulary {
 public:
  // Looks up the special tokens in `tokenizer`; `n_vocab` is the model's output size.
  static absl::StatusOr<Vocabulary> Create(text::BpeTokenizer tokenizer, int n_vocab);

  const text::BpeTokenizer& tokenizer() const { return tokenizer_; }
  const SpecialTokens& special() const { return special_; }
  int n_vocab() const { return n_vocab_; }

  // The start-of-transcript sequence: <|sot|> for English-only models; with the language and
  // task tokens for multilingual ones (language "en", task "transcribe" by default).
  std::vector<int> SotSequence() const;

  // Tokens that greedy decoding never emits, as faster-whisper's `suppress_tokens=[-1]` builds
  // them: symbols that mark non-speech annotations (♪, [, (, ...) plus the task/control tokens.
  // Tokenized once, in Create: every decoded window's rules start from them.
  const std::vector<int>& SuppressedTokens() const { return suppressed_; }

  // The first token of " " (suppressed at a window's first step with suppress_blank), or −1.
  int blank_token() const { return blank_token_; }

  // Text of the tokens below <|endoftext|> (timestamps and control tokens are dropped).
  std::string DecodeText(const std::vector<int>& tokens) const;

  // Whether the text of `token` (below <|endoftext|>) begins with a space: in Whisper's
  // byte-level BPE, the first token of a word. False for special tokens and ids out of range.
  // Looked up in a table made in Create (the streaming policy asks for every decoded token).
  bool BeginsWithSpace(int token) const {
    return token >= 0 && static_cast<size_t>(token) < begins_with_space_.size() &&
           begins_with_space_[static_cast<size_t>(token)];
  }

 private:
  Vocabulary(text::BpeTokenizer tokenizer, SpecialTokens special, int n_vocab)
      : tokenizer_(std::move(tokenizer)), special_(special), n_vocab_(n_vocab) {}
  std::vector<int> TokenizeSuppressed() const;

  text::BpeTokenizer tokenizer_;
  SpecialTokens special_;
  int n_vocab_;
  std::vector<int> suppressed_;
  int blank_token_ = -1;
  std::vector<bool> begins_with_space_;  // by token, below <|endoftext|>
};

}  // namespace waav::whisper
