#include "engine/text/bpe_tokenizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/status.h"
#include "engine/text/json_file.h"
#include "engine/text/pretokenize.h"
#include "engine/text/unicode.h"

namespace waav::text {
namespace {

using nlohmann::json;

// Ids above this are rejected as absurd (Whisper uses 51865).
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
// Whisper's timestamp tokens: <|0.00|> .. <|30.00|> in 20 ms steps.
constexpr int kNumTimestamps = 1501;
constexpr int kTimestampStepCs = 2;  // centiseconds

// GPT-2's reversible byte <-> character map: printable Latin-1 bytes stand for themselves, the
// other 68 bytes are moved to U+0100.. in byte order, so every token is printable text.
struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int, 256 + 68> char_to_byte{};  // -1 where the character is not in the alphabet

  ByteLevelAlphabet() {
    char_to_byte.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
      byte_to_char[static_cast<size_t>(b)] = c;
      char_to_byte[c] = b;
    }
  }

  // The bytes a byte-level token stands for, or nullopt if it uses characters outside the
  // alphabet (HF then decodes such a token as its raw UTF-8; so do we).
  std::optional<std::string> Unmap(const std::string& token) const {
    std::string bytes;
    for (size_t pos = 0; pos < token.size();) {
      const Utf8Char c = DecodeUtf8(token, pos);
      if (!c.valid || c.code_point >= char_to_byte.size() || char_to_byte[c.code_point] < 0) {
        return std::nullopt;
      }
      bytes.push_back(static_cast<char>(char_to_byte[c.code_point]));
      pos += static_cast<size_t>(c.length_bytes);
    }
    return bytes;
  }
};

const ByteLevelAlphabet& Alphabet() {
  static const ByteLevelAlphabet* alphabet = new ByteLevelAlphabet();
  return *alphabet;
}

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Member `key` of `obj` or nullptr when absent.
const json* Find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

absl::Status CheckByteLevel(const std::string& path, const json& root, const char* key,
                            bool required, bool* add_prefix_space) {
  const json* node = Find(root, key);
  if (node == nullptr || node->is_null()) {
    if (!required) return absl::OkStatus();
    return Invalid(path, absl::StrCat(key, " is missing; only ByteLevel is supported"));
  }
  const json* type = node->is_object() ? Find(*node, "type") : nullptr;
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "ByteLevel") {
    return Invalid(path, absl::StrCat("unsupported ", key, " ", node->dump().substr(0, 80),
                                      "; only ByteLevel is supported"));
  }
  if (const json* use_regex = Find(*node, "use_regex");
      use_regex != nullptr && !(use_regex->is_boolean() && use_regex->get<bool>())) {
    return Invalid(path, absl::StrCat(key, ".use_regex must be true"));
  }
  if (add_prefix_space != nullptr) {
    const json* aps = Find(*node, "add_prefix_space");
    if (aps != nullptr && !aps->is_boolean()) {
      return Invalid(path, absl::StrCat(key, ".add_prefix_space must be a boolean"));
    }
    *add_prefix_space = aps != nullptr && aps->get<bool>();
  }
  return absl::OkStatus();
}

std::string TimestampText(int index) {
  const int cs = index * kTimestampStepCs;
  return absl::StrFormat("<|%d.%02d|>", cs / 100, cs % 100);
}

}  // namespace

class BpeTokenizerLoader {
 public:
  explicit BpeTokenizerLoader(std::string path) : path_(std::move(path)) {}

  absl::StatusOr<BpeTokenizer> Load() {
    ASSIGN_OR_RETURN(const json root, ReadJsonFile(path_));
    if (!root.is_object()) {
      return Invalid(path_, absl::StrCat("top level is ", JsonTypeName(root), ", not an object"));
    }
    const json* model = Find(root, "model");
    if (model == nullptr || !model->is_object()) {
      return Invalid(path_, "'model' is missing or not an object");
    }
    RETURN_IF_ERROR(CheckModelOptions(*model));
    if (const json* norm = Find(root, "normalizer"); norm != nullptr && !norm->is_null()) {
      return Invalid(path_, "normalizers are not supported ('normalizer' must be null)");
    }
    RETURN_IF_ERROR(
        CheckByteLevel(path_, root, "pre_tokenizer", /*required=*/true, &tok_.add_prefix_space_));
    RETURN_IF_ERROR(CheckByteLevel(path_, root, "decoder", /*required=*/false, nullptr));
    RETURN_IF_ERROR(LoadVocab(*model));
    RETURN_IF_ERROR(LoadMerges(*model));
    RETURN_IF_ERROR(LoadAddedTokens(root));
    AddWhisperTimestamps();
    return std::move(tok_);
  }

 private:
  absl::Status CheckModelOptions(const json& model) {
    if (const json* type = Find(model, "type");
        type != nullptr && !(type->is_string() && type->get<std::string>() == "BPE")) {
      return Invalid(path_,
                     absl::StrCat("model.type is ", type->dump(), "; only BPE is supported"));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* v = Find(model, key);
      if (v != nullptr && !v->is_null() && !(v->is_string() && v->get<std::string>().empty())) {
        return Invalid(path_, absl::StrCat("model.", key, " is not supported"));
      }
    }
    if (const json* v = Find(model, "dropout");
        v != nullptr && !v->is_null() && !(v->is_number() && v->get<double>() == 0.0)) {
      return Invalid(path_, "model.dropout is not supported");
    }
    if (const json* v = Find(model, "ignore_merges"); v != nullptr && v->is_boolean() && *v) {
      return Invalid(path_, "model.ignore_merges is not supported");
    }
    return absl::OkStatus();
  }

  absl::Status LoadVocab(const json& model) {
    const json* vocab = Find(model, "vocab");
    if (vocab == nullptr) return Invalid(path_, "model.vocab is missing");
    if (!vocab->is_object() || vocab->empty()) {
      return Invalid(path_, absl::StrCat("model.vocab must be a non-empty object, not ",
                                         JsonTypeName(*vocab)));
    }
    const size_t n = vocab->size();
    tok_.id_bytes_.assign(n, std::string());
    tok_.id_kind_.assign(n, BpeTokenizer::IdKind::kUnused);
    tok_.token_to_id_.reserve(n);
    // Ids must be exactly 0..n-1: a gap or a repeat means a damaged file (JSON objects with a
    // repeated key silently keep one value, which shows up here as a gap).
    for (const auto& [token, id_json] : vocab->items()) {
      ASSIGN_OR_RETURN(const int64_t id, JsonInt(id_json, 0, static_cast<int64_t>(n) - 1, path_,
                                                 absl::StrCat("id of vocab token '", token, "'")));
      const size_t i = static_cast<size_t>(id);
      if (tok_.id_kind_[i] != BpeTokenizer::IdKind::kUnused) {
        return Invalid(path_, absl::StrCat("model.vocab gives id ", id, " to both '", token,
                                           "' and another token"));
      }
      tok_.id_kind_[i] = BpeTokenizer::IdKind::kVocab;
      std::optional<std::string> bytes = Alphabet().Unmap(token);
      tok_.id_bytes_[i] = bytes.has_value() ? *std::move(bytes) : token;
      tok_.token_to_id_.emplace(token, static_cast<int>(id));
    }
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      AppendUtf8(Alphabet().byte_to_char[static_cast<size_t>(b)], &ch);
      auto it = tok_.token_to_id_.find(ch);
      if (it == tok_.token_to_id_.end()) {
        return Invalid(path_, absl::StrFormat("model.vocab lacks the byte-level token for byte "
                                              "0x%02X ('%s'); not a byte-level BPE vocabulary",
                                              b, ch));
      }
      tok_.byte_token_id_[static_cast<size_t>(b)] = it->second;
    }
    return absl::OkStatus();
  }

  absl::Status LoadMerges(const json& model) {
    const json* merges = Find(model, "merges");
    if (merges == nullptr) return Invalid(path_, "model.merges is missing");
    if (!merges->is_array()) {
      return Invalid(path_,
                     absl::StrCat("model.merges must be an array, not ", JsonTypeName(*merges)));
    }
    tok_.merges_.reserve(merges->size());
    int rank = 0;
    for (const json& m : *merges) {
      std::string left, right;
      if (m.is_string()) {
        // "left right": tokens never contain U+0020 (byte-level maps it to 'Ġ').
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          return Invalid(path_, absl::StrCat("model.merges[", rank, "] '", s,
                                             "' is not two tokens separated by one space"));
        }
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        return Invalid(path_, absl::StrCat("model.merges[", rank, "] is ", m.dump().substr(0, 80),
                                           "; expected \"a b\" or [\"a\", \"b\"]"));
      }
      ASSIGN_OR_RETURN(const int left_id, MergeTokenId(rank, left));
      ASSIGN_OR_RETURN(const int right_id, MergeTokenId(rank, right));
      ASSIGN_OR_RETURN(const int result_id, MergeTokenId(rank, left + right));
      if (!tok_.merges_.try_emplace(BpeTokenizer::PairKey(left_id, right_id), rank, result_id)
               .second) {
        return Invalid(path_, absl::StrCat("model.merges[", rank, "] '", left, " ", right,
                                           "' repeats an earlier merge"));
      }
      ++rank;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> MergeTokenId(int rank, const std::string& token) {
    auto it = tok_.token_to_id_.find(token);
    if (it == tok_.token_to_id_.end()) {
      return Invalid(path_, absl::StrCat("model.merges[", rank, "] refers to '", token,
                                         "', which is not in model.vocab"));
    }
    return it->second;
  }

  absl::Status LoadAddedTokens(const json& root) {
    const json* added = Find(root, "added_tokens");
    if (added == nullptr || added->is_null()) return absl::OkStatus();
    if (!added->is_array()) {
      return Invalid(path_,
                     absl::StrCat("added_tokens must be an array, not ", JsonTypeName(*added)));
    }
    for (size_t k = 0; k < added->size(); ++k) {
      const json& t = (*added)[k];
      const std::string where = absl::StrCat("added_tokens[", k, "]");
      const json* id_json = t.is_object() ? Find(t, "id") : nullptr;
      const json* content = t.is_object() ? Find(t, "content") : nullptr;
      if (id_json == nullptr || content == nullptr || !content->is_string() ||
          content->get<std::string>().empty()) {
        return Invalid(path_, absl::StrCat(where,
                                           " needs an integer 'id' and a non-empty "
                                           "string 'content'"));
      }
      ASSIGN_OR_RETURN(const int64_t id, JsonInt(*id_json, 0, kMaxId, path_, where + ".id"));
      const json* special = Find(t, "special");
      if (special != nullptr && !special->is_boolean()) {
        return Invalid(path_, where + ".special must be a boolean");
      }
      const bool is_special = special != nullptr && special->get<bool>();
      RETURN_IF_ERROR(
          AddToken(static_cast<int>(id), content->get<std::string>(), is_special, where));
    }
    return absl::OkStatus();
  }

  absl::Status AddToken(int id, const std::string& content, bool special,
                        const std::string& where) {
    const size_t i = static_cast<size_t>(id);
    if (i >= tok_.id_bytes_.size()) {
      tok_.id_bytes_.resize(i + 1);
      tok_.id_kind_.resize(i + 1, BpeTokenizer::IdKind::kUnused);
    }
    const BpeTokenizer::IdKind kind =
        special ? BpeTokenizer::IdKind::kSpecial : BpeTokenizer::IdKind::kAdded;
    switch (tok_.id_kind_[i]) {
      case BpeTokenizer::IdKind::kUnused:
        break;
      case BpeTokenizer::IdKind::kVocab: {
        // Allowed when it names the same token (Whisper's <|endoftext|> is both).
        auto it = tok_.token_to_id_.find(content);
        if (it == tok_.token_to_id_.end() || it->second != id) {
          return Invalid(path_, absl::StrCat(where, " '", content, "' reuses id ", id,
                                             " of a different vocab token"));
        }
        break;
      }
      default:
        return Invalid(path_, absl::StrCat(where, " '", content, "' reuses id ", id,
                                           " of another added token"));
    }
    if (auto it = tok_.token_to_id_.find(content);
        it != tok_.token_to_id_.end() && it->second != id) {
      return Invalid(path_, absl::StrCat(where, " '", content, "' already has id ", it->second));
    }
    tok_.id_kind_[i] = kind;
    tok_.id_bytes_[i] = content;  // the decoders copy added tokens through verbatim
    tok_.token_to_id_[content] = id;
    return absl::OkStatus();
  }

  void AddWhisperTimestamps() {
    auto no_ts = tok_.token_to_id_.find("<|notimestamps|>");
    if (no_ts == tok_.token_to_id_.end() || tok_.token_to_id_.contains(TimestampText(0))) return;
    const int first = no_ts->second + 1;
    const size_t end = static_cast<size_t>(first + kNumTimestamps);
    for (size_t i = static_cast<size_t>(first); i < std::min(end, tok_.id_kind_.size()); ++i) {
      if (tok_.id_kind_[i] != BpeTokenizer::IdKind::kUnused) return;  // ids taken: not Whisper
    }
    for (int k = 0; k < kNumTimestamps; ++k) {
      // Cannot fail: the ids are free and the texts new (checked above).
      AddToken(first + k, TimestampText(k), /*special=*/true, "timestamp").IgnoreError();
    }
  }

  std::string path_;
  BpeTokenizer tok_;
};

absl::StatusOr<BpeTokenizer> BpeTokenizer::FromTokenizerJson(const std::string& path) {
  return BpeTokenizerLoader(path).Load();
}

bool BpeTokenizer::IsSpecial(int id) const {
  return id >= 0 && static_cast<size_t>(id) < id_kind_.size() &&
         id_kind_[static_cast<size_t>(id)] == IdKind::kSpecial;
}

std::optional<int> BpeTokenizer::TokenId(std::string_view token) const {
  // Debian's Abseil has its own string_view; heterogeneous lookup wants that one.
  auto it = token_to_id_.find(absl::string_view(token.data(), token.size()));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> BpeTokenizer::Encode(std::string_view text) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed = std::string(" ") + std::string(text);
    text = prefixed;
  }
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 1);
  for (std::string_view piece : SplitGpt2(text)) EncodePiece(piece, &ids);
  return ids;
}

// Classic BPE on one pre-token: repeatedly merge the adjacent pair with the lowest merge rank
// (leftmost first among equals), as HF tokenizers does. Symbols form a linked list over the
// piece's bytes; a min-heap holds candidate pairs, and stale entries (one side already merged
// into something else) are skipped when popped. O(n log n) in the piece length.
void BpeTokenizer::EncodePiece(std::string_view piece, std::vector<int>* ids) const {
  const int n = static_cast<int>(piece.size());
  if (n == 0) return;
  if (n == 1) {
    ids->push_back(byte_token_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  std::vector<int> sym(static_cast<size_t>(n));  // token id per symbol; -1 once merged away
  std::vector<int> next(static_cast<size_t>(n));
  std::vector<int> prev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    sym[static_cast<size_t>(i)] =
        byte_token_id_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])];
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }

  struct Candidate {
    int rank, left, right, left_id, right_id, result_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int a = sym[static_cast<size_t>(left)], b = sym[static_cast<size_t>(right)];
    auto it = merges_.find(PairKey(a, b));
    if (it != merges_.end()) {
      heap.push({it->second.rank, left, right, a, b, it->second.result_id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
    if (sym[l] != c.left_id || sym[r] != c.right_id || next[l] != c.right) continue;  // stale
    sym[l] = c.result_id;
    sym[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = c.left;
    consider(prev[l], c.left);
    consider(c.left, next[l]);
  }
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)])
    ids->push_back(sym[static_cast<size_t>(i)]);
}

std::string BpeTokenizer::DecodeImpl(absl::Span<const int> ids, bool keep_specials) const {
  std::string bytes;
  for (const int id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_kind_.size()) continue;
    const IdKind kind = id_kind_[static_cast<size_t>(id)];
    if (kind == IdKind::kUnused || (kind == IdKind::kSpecial && !keep_specials)) continue;
    bytes += id_bytes_[static_cast<size_t>(id)];
  }
  return ToValidUtf8(bytes);
}

std::string BpeTokenizer::Decode(absl::Span<const int> ids) const {
  return DecodeImpl(ids, /*keep_specials=*/false);
}

std::string BpeTokenizer::DecodeWithSpecials(absl::Span<const int> ids) const {
  return DecodeImpl(ids, /*keep_specials=*/true);
}

}  // namespace waav::text
