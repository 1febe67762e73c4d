// Byte-level BPE tokenizer (GPT-2 style) as Whisper uses it, built from a HF tokenizers
// `tokenizer.json`. Supported: model.type BPE with vocab and merges (strings "a b" or pairs),
// pre_tokenizer ByteLevel (GPT-2 split, see pretokenize.h), decoder ByteLevel or none, no
// normalizer, added_tokens. Anything else in the file is rejected as unsupported rather than
// silently tokenized differently.
//
// Whisper timestamps: faster-whisper's tokenizer.json stops at <|notimestamps|>; the model's
// vocabulary continues with the timestamp tokens <|0.00|> .. <|30.00|> (1501 ids in steps of
// 20 ms). When the file has <|notimestamps|> but no <|0.00|>, those tokens are added as special
// tokens at the ids that follow <|notimestamps|> (50363..51863 for tiny.en), as faster-whisper's
// `timestamp_begin = no_timestamps + 1` assumes.
//
// Thread safety: all methods are const and may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace waav::text {

class BpeTokenizer {
 public:
  // Loads and validates the file. Errors name the file and the offending field.
  static absl::StatusOr<BpeTokenizer> FromTokenizerJson(const std::string& path);

  // Token ids of `text`; no special tokens are added. The text is taken literally: strings such
  // as "<|endoftext|>" inside it are tokenized as plain text, never mapped to the special token
  // (HF matches added tokens inside the text; we do not, so a user prompt cannot inject control
  // tokens). Ill-formed UTF-8 is encoded byte for byte.
  std::vector<int> Encode(std::string_view text) const;

  // Text of `ids` with special tokens (added tokens marked special, and the timestamps) and
  // unknown ids skipped. Byte-level tokens are joined as bytes first, so a character split
  // across tokens comes back whole; ill-formed UTF-8 becomes U+FFFD per maximal subpart, as HF
  // (Rust's from_utf8_lossy) does.
  std::string Decode(absl::Span<const int> ids) const;
  // Like Decode but special tokens are kept as their text ("<|en|>", "<|1.24|>").
  std::string DecodeWithSpecials(absl::Span<const int> ids) const;

  // Id of a token given as the file spells it: a vocab entry in byte-level form ("Ġthe" for
  // " the") or an added token ("<|endoftext|>"), including the synthesized timestamps.
  std::optional<int> TokenId(std::string_view token) const;

  // One more than the largest id, added tokens and timestamps included (51864 for tiny.en).
  int vocab_size() const { return static_cast<int>(id_bytes_.size()); }
  // True for added tokens marked special and for the synthesized timestamps.
  bool IsSpecial(int id) const;

 private:
  enum class IdKind : uint8_t { kUnused, kVocab, kAdded, kSpecial };
  struct Merge {
    int rank;       // priority: lower merges first
    int result_id;  // id of the concatenated token
  };

  BpeTokenizer() = default;
  void EncodePiece(std::string_view piece, std::vector<int>* ids) const;
  std::string DecodeImpl(absl::Span<const int> ids, bool keep_specials) const;
  static uint64_t PairKey(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // Per id: the bytes it decodes to and what kind of id it is.
  std::vector<std::string> id_bytes_;
  std::vector<IdKind> id_kind_;
  // Vocab tokens in byte-level form and added token contents.
  absl::flat_hash_map<std::string, int> token_to_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int, 256> byte_token_id_{};  // id of the single-byte token for each byte value
  bool add_prefix_space_ = false;

  friend class BpeTokenizerLoader;
};

}  // namespace waav::text
