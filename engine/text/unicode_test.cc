#include "engine/text/unicode.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace waav::text {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, DecodesWellFormedCharacters) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  const char32_t expected[] = {U'a', 0xE9, 0x4E2D, 0x1F600};
  const int lengths[] = {1, 2, 3, 4};
  size_t pos = 0;
  for (int k = 0; k < 4; ++k) {
    const Utf8Char c = DecodeUtf8(s, pos);
    EXPECT_TRUE(c.valid);
    EXPECT_EQ(c.code_point, expected[k]);
    EXPECT_EQ(c.length_bytes, lengths[k]);
    pos += static_cast<size_t>(c.length_bytes);
  }
  EXPECT_EQ(pos, s.size());
}

// Expected strings are what Python's bytes.decode("utf-8", "replace") gives (maximal-subpart
// substitution; Rust's from_utf8_lossy, used by HF tokenizers, agrees).
TEST(Utf8Test, ReplacesIllFormedSubpartsLikePython) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"\xE2\x82", kFffd},  // truncated 3-byte sequence: one
      {"\xE2\x82"
       "A",
       kFffd + "A"},                                        // truncated before ASCII
      {"\xE0\x80\x80", kFffd + kFffd + kFffd},              // overlong: E0 needs A0..BF next
      {"\xC0\xAF", kFffd + kFffd},                          // C0 never starts a sequence
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},              // surrogate U+D800
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // above U+10FFFF
      {"\xF0\x9F\x98", kFffd},                              // truncated emoji
      {"\xF0\x9F\x98"
       "\xF0\x9F\x98\x80",
       kFffd + "\xF0\x9F\x98\x80"},
      {"\x80\xBF", kFffd + kFffd},  // lone continuation bytes
      {"\xFF"
       "a\xFE",
       kFffd + "a" + kFffd},
      {"ok \xC3\xA9", "ok \xC3\xA9"},
  };
  for (const Case& c : cases) EXPECT_EQ(ToValidUtf8(c.in), c.out) << "input of " << c.in.size();
}

TEST(Utf8Test, EncodeDecodeRoundTripOnRandomScalars) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> dist(0, 0x10FFFF);
  for (int i = 0; i < 20000; ++i) {
    char32_t cp = dist(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, &s);
    const Utf8Char c = DecodeUtf8(s, 0);
    ASSERT_TRUE(c.valid) << std::hex << static_cast<uint32_t>(cp);
    ASSERT_EQ(c.code_point, cp);
    ASSERT_EQ(static_cast<size_t>(c.length_bytes), s.size());
    ASSERT_EQ(ToValidUtf8(s), s);
  }
  std::string surrogate;
  AppendUtf8(0xD800, &surrogate);
  EXPECT_EQ(surrogate, kFffd);
}

TEST(Utf8Test, RandomBytesBecomeValidUtf8) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 16, '\0');
    for (char& ch : s) ch = static_cast<char>(rng());
    const std::string fixed = ToValidUtf8(s);
    ASSERT_EQ(ToValidUtf8(fixed), fixed);  // idempotent: the output is well formed
  }
}

TEST(UnicodeClassTest, Letters) {
  for (char32_t cp : {U'a', U'Z', U'\u00E9', U'\u00DF', U'\u4E2D', U'\uAC00', U'\u05D0', U'\u02B0',
                      U'\U0001D400', U'\U00020000', U'\u00AA'}) {
    EXPECT_TRUE(IsLetter(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  for (char32_t cp :
       {U'0', U' ', U'\'', U'\u0301', U'\U0001F600', U'\u00D7', U'\u3002', U'\u200D', U'\uFE0F'}) {
    EXPECT_FALSE(IsLetter(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(UnicodeClassTest, Numbers) {
  for (char32_t cp :
       {U'0', U'9', U'\u0663', U'\u00BD', U'\u00B2', U'\u216B', U'\u0ED3', U'\U0001D7CE'}) {
    EXPECT_TRUE(IsNumber(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  for (char32_t cp : {U'a', U'.', U'\u4E00', U'\U0001F600'}) {
    EXPECT_FALSE(IsNumber(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(UnicodeClassTest, WhiteSpaceIsTheWhiteSpaceProperty) {
  for (char32_t cp :
       {U' ', U'\t', U'\n', U'\v', U'\f', U'\r', U'\u0085', U'\u00A0', U'\u1680', U'\u2000',
        U'\u200A', U'\u2028', U'\u2029', U'\u202F', U'\u205F', U'\u3000'}) {
    EXPECT_TRUE(IsWhiteSpace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  // U+001C..U+001F are spaces to Python's isspace but not to Oniguruma's \s.
  for (char32_t cp : {U'\u001C', U'\u001F', U'\u200B', U'\u180E', U'a', U'\u00AD'}) {
    EXPECT_FALSE(IsWhiteSpace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

}  // namespace
}  // namespace waav::text
