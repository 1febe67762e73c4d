#include "engine/models/whisper/vocabulary.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace waav::whisper {

absl::StatusOr<Vocabulary> Vocabulary::Create(text::BpeTokenizer tokenizer, int n_vocab) {
  auto id = [&](const char* token) -> absl::StatusOr<int> {
    auto found = tokenizer.TokenId(token);
    if (!found)
      return absl::InvalidArgumentError(absl::StrCat("tokenizer has no ", token, " token"));
    return *found;
  };
  SpecialTokens s;
  absl::StatusOr<int> v;
  if (!(v = id("<|endoftext|>")).ok()) return v.status();
  s.eot = *v;
  if (!(v = id("<|startoftranscript|>")).ok()) return v.status();
  s.sot = *v;
  if (!(v = id("<|translate|>")).ok()) return v.status();
  s.translate = *v;
  if (!(v = id("<|transcribe|>")).ok()) return v.status();
  s.transcribe = *v;
  if (!(v = id("<|startoflm|>")).ok()) return v.status();
  s.sot_lm = *v;
  if (!(v = id("<|startofprev|>")).ok()) return v.status();
  s.sot_prev = *v;
  if (!(v = id("<|notimestamps|>")).ok()) return v.status();
  s.no_timestamps = *v;
  auto no_speech = tokenizer.TokenId("<|nospeech|>");
  if (!no_speech) no_speech = tokenizer.TokenId("<|nocaptions|>");
  if (!no_speech) return absl::InvalidArgumentError("tokenizer has no <|nospeech|> token");
  s.no_speech = *no_speech;
  s.timestamp_begin = s.no_timestamps + 1;
  // Multilingual vocabularies have one more language token (51865 entries vs 51864).
  s.multilingual = n_vocab >= 51865;
  if (n_vocab <= s.timestamp_begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("model vocabulary of ", n_vocab, " tokens has no timestamp tokens"));
  }
  Vocabulary vocabulary(std::move(tokenizer), s, n_vocab);
  vocabulary.suppressed_ = vocabulary.TokenizeSuppressed();
  const std::vector<int> space = vocabulary.tokenizer_.Encode(" ");
  if (!space.empty()) vocabulary.blank_token_ = space[0];
  vocabulary.begins_with_space_.resize(static_cast<size_t>(s.eot));
  for (int token = 0; token < s.eot; ++token) {
    const std::string piece = vocabulary.tokenizer_.Decode(absl::MakeConstSpan(&token, 1));
    vocabulary.begins_with_space_[static_cast<size_t>(token)] = !piece.empty() && piece[0] == ' ';
  }
  return vocabulary;
}

std::vector<int> Vocabulary::SotSequence() const {
  std::vector<int> sequence = {special_.sot};
  if (special_.multilingual) {
    auto en = tokenizer_.TokenId("<|en|>");
    if (en) sequence.push_back(*en);
    sequence.push_back(special_.transcribe);
  }
  return sequence;
}

std::vector<int> Vocabulary::TokenizeSuppressed() const {
  // Same construction as openai-whisper's Tokenizer.non_speech_tokens.
  std::vector<std::string> symbols;
  for (const char* s : {"\"", "#", "(", ")", "*", "+", "/", ":", ";", "<",  "=",  ">",  "@", "[",
                        "\\", "]", "^", "_", "`", "{", "|", "}", "~", "「", "」", "『", "』"}) {
    symbols.emplace_back(s);
  }
  for (absl::string_view s :
       absl::StrSplit("<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪", ' ')) {
    symbols.emplace_back(s);
  }
  // U+2640..U+267F symbols: suppress their first byte-level token even when they split.
  const std::vector<std::string> miscellaneous = {"♩", "♪", "♫", "♬", "♭", "♮", "♯"};
  std::set<int> result;
  for (const char* prefix : {" -", " '"}) {
    const std::vector<int> ids = tokenizer_.Encode(prefix);
    if (!ids.empty()) result.insert(ids[0]);
  }
  auto consider = [&](const std::string& symbol, bool always) {
    for (const std::string& text : {symbol, " " + symbol}) {
      const std::vector<int> ids = tokenizer_.Encode(text);
      if (!ids.empty() && (ids.size() == 1 || always)) result.insert(ids[0]);
    }
  };
  for (const std::string& symbol : symbols) consider(symbol, false);
  for (const std::string& symbol : miscellaneous) consider(symbol, true);
  for (int id : {special_.transcribe, special_.translate, special_.sot, special_.sot_prev,
                 special_.sot_lm, special_.no_speech}) {
    result.insert(id);
  }
  return std::vector<int>(result.begin(), result.end());
}

std::string Vocabulary::DecodeText(const std::vector<int>& tokens) const {
  std::vector<int> text;
  for (int t : tokens)
    if (t < special_.eot) text.push_back(t);
  return tokenizer_.Decode(text);
}

}  // namespace waav::whisper
