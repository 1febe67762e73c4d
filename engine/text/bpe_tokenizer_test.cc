#include "engine/text/bpe_tokenizer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/text/json_file.h"
#include "engine/text/unicode.h"

namespace waav::text {
namespace {

using nlohmann::json;

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = testing::TempDir() + "/bpe_tokenizer_test_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// GPT-2's byte-level character for a byte, as UTF-8.
std::string ByteChar(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  char32_t c = static_cast<char32_t>(b);
  if (!printable) {
    c = 256;
    for (int k = 0; k < b; ++k) {
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) ++c;
    }
  }
  std::string s;
  AppendUtf8(c, &s);
  return s;
}

// A small byte-level tokenizer.json: the 256 byte tokens (ids 0..255), then `extra` tokens,
// the given merges and added tokens.
json SyntheticTokenizer(const std::vector<std::string>& extra,
                        const std::vector<std::string>& merges, const json& added = json::array()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  int next = 256;
  for (const std::string& t : extra) vocab[t] = next++;
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

absl::StatusOr<BpeTokenizer> LoadJson(const std::string& name, const json& j) {
  return BpeTokenizer::FromTokenizerJson(WriteTemp(name, j.dump()));
}

TEST(BpeTokenizerTest, AppliesMergesByRank) {
  const json j = SyntheticTokenizer({"he", "ll", "hell", "hello",
                                     "\xC4\xA0"
                                     "h",
                                     "ab", "bc"},
                                    {"h e", "l l", "he ll", "hell o", "\xC4\xA0 h", "a b", "b c"});
  absl::StatusOr<BpeTokenizer> tok = LoadJson("merges.json", j);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 263);
  EXPECT_EQ(tok->Encode("hello"), (std::vector<int>{259}));
  EXPECT_EQ(tok->Encode("hel"), (std::vector<int>{256, 'l'}));
  EXPECT_EQ(tok->Encode("abc"), (std::vector<int>{261, 'c'}));     // "a b" outranks "b c"
  EXPECT_EQ(tok->Encode(" hello"), (std::vector<int>{' ', 259}));  // "h e" outranks "Ġ h"
  EXPECT_EQ(tok->Encode(" hx"), (std::vector<int>{260, 'x'}));
  EXPECT_EQ(tok->Decode(tok->Encode(" hello abc")), " hello abc");

  // Reversed ranks: "b c" first.
  const json j2 = SyntheticTokenizer({"ab", "bc"}, {"b c", "a b"});
  absl::StatusOr<BpeTokenizer> tok2 = LoadJson("merges2.json", j2);
  ASSERT_TRUE(tok2.ok()) << tok2.status();
  EXPECT_EQ(tok2->Encode("abc"), (std::vector<int>{'a', 257}));
  // Merges given as pairs (newer tokenizers versions) work the same.
  json j3 = SyntheticTokenizer({"ab", "bc"}, {});
  j3["model"]["merges"] = json::array({json::array({"b", "c"}), json::array({"a", "b"})});
  absl::StatusOr<BpeTokenizer> tok3 = LoadJson("merges3.json", j3);
  ASSERT_TRUE(tok3.ok()) << tok3.status();
  EXPECT_EQ(tok3->Encode("abc"), (std::vector<int>{'a', 257}));
}

TEST(BpeTokenizerTest, AddedTokens) {
  const json added =
      json::array({{{"id", 256}, {"content", "[plain]"}, {"special", false}},
                   {{"id", 257}, {"content", "<|endoftext|>"}, {"special", true}},
                   {{"id", 258}, {"content", "<|notimestamps|>"}, {"special", true}}});
  absl::StatusOr<BpeTokenizer> tok = LoadJson("added.json", SyntheticTokenizer({}, {}, added));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->TokenId("<|endoftext|>"), 257);
  EXPECT_EQ(tok->TokenId("[plain]"), 256);
  EXPECT_EQ(tok->TokenId("<|0.00|>"), 259);  // timestamps follow <|notimestamps|>
  EXPECT_EQ(tok->TokenId("<|0.02|>"), 260);
  EXPECT_EQ(tok->TokenId("<|30.00|>"), 259 + 1500);
  EXPECT_EQ(tok->vocab_size(), 259 + 1501);
  EXPECT_TRUE(tok->IsSpecial(257));
  EXPECT_FALSE(tok->IsSpecial(256));
  EXPECT_TRUE(tok->IsSpecial(1759));
  EXPECT_FALSE(tok->IsSpecial(1760));
  EXPECT_FALSE(tok->TokenId("nope").has_value());
  const std::vector<int> ids = {257, 'a', 256, 259 + 50, 'b', 258, -1, 99999};
  EXPECT_EQ(tok->Decode(ids), "a[plain]b");
  EXPECT_EQ(tok->DecodeWithSpecials(ids), "<|endoftext|>a[plain]<|1.00|>b<|notimestamps|>");

  // No timestamps when the ids after <|notimestamps|> are taken: that is not a Whisper layout.
  json taken = added;
  taken.push_back({{"id", 259}, {"content", "<|other|>"}, {"special", true}});
  absl::StatusOr<BpeTokenizer> tok2 = LoadJson("added2.json", SyntheticTokenizer({}, {}, taken));
  ASSERT_TRUE(tok2.ok()) << tok2.status();
  EXPECT_FALSE(tok2->TokenId("<|0.00|>").has_value());
  EXPECT_EQ(tok2->vocab_size(), 260);
}

struct BadCase {
  const char* name;
  std::function<void(json&)> corrupt;
  const char* message;  // expected in the error
};

TEST(BpeTokenizerTest, RejectsBadFiles) {
  const std::vector<BadCase> cases = {
      {"no_model", [](json& j) { j.erase("model"); }, "'model' is missing"},
      {"no_vocab", [](json& j) { j["model"].erase("vocab"); }, "model.vocab is missing"},
      {"vocab_array", [](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab must"},
      {"vocab_id_string", [](json& j) { j["model"]["vocab"]["x"] = "1"; }, "must be an integer"},
      {"vocab_gap", [](json& j) { j["model"]["vocab"]["x"] = 400; }, "outside"},
      {"vocab_repeat", [](json& j) { j["model"]["vocab"]["x"] = 3; }, "gives id 3 to both"},
      {"missing_byte",
       [](json& j) {
         j["model"]["vocab"].erase("a");
         j["model"]["vocab"]["zz"] = 'a';
         j["model"]["merges"] = json::array();
       },
       "byte 0x61"},
      {"no_merges", [](json& j) { j["model"].erase("merges"); }, "model.merges is missing"},
      {"merges_object", [](json& j) { j["model"]["merges"] = json::object(); },
       "model.merges must be an array"},
      {"merge_unknown", [](json& j) { j["model"]["merges"].push_back("a zzz"); },
       "'zzz', which is not in model.vocab"},
      {"merge_result_unknown", [](json& j) { j["model"]["merges"].push_back("x y"); },
       "'xy', which is not in model.vocab"},
      {"merge_one_token", [](json& j) { j["model"]["merges"].push_back("ab"); }, "not two tokens"},
      {"merge_number", [](json& j) { j["model"]["merges"].push_back(7); }, "model.merges[1]"},
      {"merge_repeat", [](json& j) { j["model"]["merges"].push_back("a b"); }, "repeats"},
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, "only BPE"},
      {"suffix", [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "not supported"},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "normalizer"},
      {"pre_tokenizer",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "unsupported pre_tokenizer"},
      {"no_pre_tokenizer", [](json& j) { j.erase("pre_tokenizer"); }, "pre_tokenizer is missing"},
      {"no_regex", [](json& j) { j["pre_tokenizer"]["use_regex"] = false; }, "use_regex"},
      {"decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "unsupported decoder"},
      {"added_not_array", [](json& j) { j["added_tokens"] = 5; }, "added_tokens must be"},
      {"added_no_id",
       [](json& j) {
         j["added_tokens"].push_back({{"content", "<x>"}});
       },
       "added_tokens[0]"},
      {"added_conflict",
       [](json& j) {
         j["added_tokens"].push_back({{"id", 5}, {"content", "<x>"}});
       },
       "reuses id 5"},
      {"added_negative",
       [](json& j) {
         j["added_tokens"].push_back({{"id", -2}, {"content", "<x>"}});
       },
       "outside"},
      {"top_array", [](json& j) { j = json::array({1}); }, "not an object"},
  };
  for (const BadCase& c : cases) {
    json j = SyntheticTokenizer({"ab"}, {"a b"});
    c.corrupt(j);
    const std::string path = WriteTemp(std::string(c.name) + ".json", j.dump());
    absl::StatusOr<BpeTokenizer> tok = BpeTokenizer::FromTokenizerJson(path);
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status();
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos)
        << c.name << ": " << tok.status();
  }
}

TEST(BpeTokenizerTest, RejectsUnreadableFiles) {
  EXPECT_EQ(BpeTokenizer::FromTokenizerJson("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
  const std::string good = SyntheticTokenizer({"ab"}, {"a b"}).dump();
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"empty.json", ""},
           {"truncated.json", good.substr(0, good.size() / 2)},
           {"truncated_end.json", good.substr(0, good.size() - 1)},
           {"not_json.json", "this is not json"}}) {
    const std::string path = WriteTemp(name, content);
    absl::StatusOr<BpeTokenizer> tok = BpeTokenizer::FromTokenizerJson(path);
    ASSERT_FALSE(tok.ok()) << name;
    EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status();
  }
}

// ---- The real Whisper tiny.en tokenizer ---------------------------------------------------------

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string RealTokenizerPath() {
  return EnvOr("WAAV_MODELS_DIR", "") + "/whisper-tiny.en/tokenizer.json";
}

class RealTokenizerTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(RealTokenizerPath())) {
      GTEST_SKIP() << "no " << RealTokenizerPath() << " (run scripts/setup to fetch the model)";
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<BpeTokenizer> tok = BpeTokenizer::FromTokenizerJson(RealTokenizerPath());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(tok.ok()) << tok.status();
    RecordProperty("load_ms", std::to_string(ms));
    std::cout << "tokenizer.json loaded in " << ms << " ms\n";
    tok_.emplace(*std::move(tok));
  }
  std::optional<BpeTokenizer> tok_;
};

TEST_F(RealTokenizerTest, SpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 51864);
  EXPECT_EQ(tok_->TokenId("<|endoftext|>"), 50256);
  EXPECT_EQ(tok_->TokenId("<|startoftranscript|>"), 50257);
  EXPECT_EQ(tok_->TokenId("<|en|>"), 50258);
  EXPECT_EQ(tok_->TokenId("<|transcribe|>"), 50358);
  EXPECT_EQ(tok_->TokenId("<|notimestamps|>"), 50362);
  EXPECT_EQ(tok_->TokenId("<|0.00|>"), 50363);
  EXPECT_EQ(tok_->TokenId("<|30.00|>"), 51863);
  EXPECT_EQ(tok_->TokenId("\xC4\xA0"
                          "the"),
            262);  // "Ġthe"
  for (int id = 0; id < 50256; ++id) ASSERT_FALSE(tok_->IsSpecial(id)) << id;
  for (int id = 50256; id < 51864; ++id) ASSERT_TRUE(tok_->IsSpecial(id)) << id;

  std::vector<int> ids = {50257, 50258, 50362};
  for (int id : tok_->Encode(" Hello")) ids.push_back(id);
  ids.push_back(50363 + 50);
  ids.push_back(50256);
  EXPECT_EQ(tok_->DecodeWithSpecials(ids),
            "<|startoftranscript|><|en|><|notimestamps|> Hello<|1.00|><|endoftext|>");
  EXPECT_EQ(tok_->Decode(ids), " Hello");
  // Special token text inside the input stays plain text.
  for (int id : tok_->Encode("<|endoftext|>")) EXPECT_LT(id, 50256);
}

TEST_F(RealTokenizerTest, DecodeJoinsSplitCharacters) {
  const int c3 = *tok_->TokenId("\xC3\x83");  // byte 0xC3 as a byte-level character 'Ã'
  const int a9 = *tok_->TokenId("\xC2\xA9");  // byte 0xA9 as '©'
  EXPECT_EQ(tok_->Decode(std::vector<int>{c3, a9}), "\xC3\xA9");  // é
  EXPECT_EQ(tok_->Decode(std::vector<int>{c3}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok_->Decode(std::vector<int>{c3, *tok_->TokenId("A")}),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(tok_->Decode(std::vector<int>{c3, 50256, a9}), "\xC3\xA9");  // specials skipped
}

TEST_F(RealTokenizerTest, MatchesCommittedHfReference) {
  const std::string path =
      EnvOr("WAAV_SOURCE_DIR", ".") + "/tests/reference/tokenizer_expected.json";
  absl::StatusOr<json> expected = ReadJsonFile(path);
  ASSERT_TRUE(expected.ok()) << expected.status();
  int n = 0;
  for (const json& c : (*expected)["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int> ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(tok_->Encode(text), ids) << "text: '" << text << "'";
    EXPECT_EQ(tok_->Decode(ids), text);
    ++n;
  }
  EXPECT_GE(n, 20);
}

// Random text from pools that exercise each branch of the split and each character class.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> pools[] = {
      {"a", "b", "z", "Q", "the", "word", "Hello", "xyzzy", "ing", "tion"},
      {"0", "7", "12", "2024", "3.14", "1,000"},
      {" ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\xC2\xA0", "\xE2\x80\x83",
       "\xE3\x80\x80", "\xC2\x85", "\x1C", "\x1F", "\xE2\x80\xA8"},
      {"'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'x"},
      {".", ",", "!", "?", "...", "-", "(", ")", "\"", "#", "$", "%",  "&", "*", "@",    "[",
       "]", "{", "}", "<", ">",   "|", "~", "`", "^",  "_", "/", "\\", ";", ":", "\x7F", "\x01"},
      {"\xC3\xA9", "\xC3\xB1", "\xC3\x9F", "\xC3\x85", "e\xCC\x81", "\xC5\x93", "\xC4\xB1"},
      {"\xE4\xB8\xAD", "\xE6\x96\x87", "\xE6\x97\xA5\xE6\x9C\xAC", "\xE3\x81\x82", "\xE3\x82\xA2",
       "\xED\x95\x9C", "\xEA\xB0\x80", "\xE3\x80\x82", "\xEF\xBC\x8C"},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x8E\x89", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
       "\xE2\x9D\xA4\xEF\xB8\x8F", "\xE2\x80\x8D", "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7"},
      {"\xCE\xB1", "\xD0\x96", "\xD7\x90", "\xD8\xB9", "\xD9\xA3", "\xC2\xBD", "\xC2\xB2",
       "\xE2\x85\xAB", "\xCA\xB0", "\xF0\x9D\x90\x80", "\xF0\xA0\x80\x80", "\xEE\x80\x80",
       "\xC2\xAD", "\xE2\x80\x8B"},
  };
  std::string s;
  const int n = static_cast<int>(rng() % 24);
  for (int k = 0; k < n; ++k) {
    const auto& pool = pools[rng() % std::size(pools)];
    s += pool[rng() % pool.size()];
  }
  return s;
}

TEST_F(RealTokenizerTest, RoundTripsRandomText) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 1000; ++i) {
    const std::string s = RandomText(rng);
    const std::vector<int> ids = tok_->Encode(s);
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 50256) << id;
    ASSERT_EQ(tok_->Decode(ids), s);
  }
}

// Runs tests/reference/tokenizer_reference.py (HF tokenizers) on freshly drawn random strings
// and id sequences and compares every answer.
TEST_F(RealTokenizerTest, MatchesHfOnRandomInput) {
  const std::string python = EnvOr("WAAV_PYTHON", "");
  const std::string script =
      EnvOr("WAAV_SOURCE_DIR", ".") + "/tests/reference/tokenizer_reference.py";
  if (python.empty() || !std::filesystem::exists(python)) {
    GTEST_SKIP() << "WAAV_PYTHON '" << python << "' not found (scripts/setup --test creates it)";
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  json request = {{"encode", json::array()}, {"decode", json::array()}};
  for (int i = 0; i < 400; ++i) request["encode"].push_back(RandomText(rng));
  for (int i = 0; i < 200; ++i) {
    std::vector<int> ids(rng() % 12);
    for (int& id : ids) {
      // Mostly single-byte tokens (ids of bytes >= 0x80 split characters), some words, some
      // specials; HF does not know the synthesized timestamps, so stay below 50363.
      const int r = static_cast<int>(rng() % 10);
      id = r < 5   ? *tok_->TokenId(ByteChar(static_cast<int>(rng() % 256)))
           : r < 9 ? static_cast<int>(rng() % 50256)
                   : 50256 + static_cast<int>(rng() % 107);
    }
    request["decode"].push_back(ids);
  }
  const std::string in_path = WriteTemp("hf_request.json", request.dump());
  const std::string out_path = testing::TempDir() + "/bpe_tokenizer_test_hf_response.json";
  const std::string cmd = "'" + python + "' '" + script + "' --tokenizer '" + RealTokenizerPath() +
                          "' --input '" + in_path + "' --output '" + out_path + "'";
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << "HF tokenizers not installed";
  ASSERT_EQ(rc, 0) << cmd;
  absl::StatusOr<json> response = ReadJsonFile(out_path);
  ASSERT_TRUE(response.ok()) << response.status();

  for (size_t i = 0; i < request["encode"].size(); ++i) {
    const std::string text = request["encode"][i].get<std::string>();
    EXPECT_EQ(tok_->Encode(text), (*response)["encode"][i].get<std::vector<int>>())
        << "text: '" << text << "'";
  }
  for (size_t i = 0; i < request["decode"].size(); ++i) {
    const std::vector<int> ids = request["decode"][i].get<std::vector<int>>();
    EXPECT_EQ(tok_->Decode(ids), (*response)["decode"][i].get<std::string>());
    EXPECT_EQ(tok_->DecodeWithSpecials(ids),
              (*response)["decode_with_specials"][i].get<std::string>());
  }
}

}  // namespace
}  // namespace waav::text
