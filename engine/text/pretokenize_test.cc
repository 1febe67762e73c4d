#include "engine/text/pretokenize.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace waav::text {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (std::string_view p : SplitGpt2(s)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(SplitGpt2Test, WordsNumbersAndPunctuation) {
  EXPECT_EQ(Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split("abc123def"), (V{"abc", "123", "def"}));
  EXPECT_EQ(Split("Hi, there!!"), (V{"Hi", ",", " there", "!!"}));
  EXPECT_EQ(Split(" 42 !?"), (V{" 42", " !?"}));
  EXPECT_EQ(Split("caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"),
            (V{"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(Split(""), V{});
}

TEST(SplitGpt2Test, Contractions) {
  EXPECT_EQ(Split("I'm we're they've I'll he'd it's don't"),
            (V{"I", "'m", " we", "'re", " they", "'ve", " I", "'ll", " he", "'d", " it", "'s",
               " don", "'t"}));
  // Case-sensitive, and matched even inside a longer word, as in GPT-2.
  EXPECT_EQ(Split("IT'S"), (V{"IT", "'", "S"}));
  EXPECT_EQ(Split("'second"), (V{"'s", "econd"}));
  EXPECT_EQ(Split(" 's"), (V{" '", "s"}));
  EXPECT_EQ(Split("'"), (V{"'"}));
}

TEST(SplitGpt2Test, Whitespace) {
  EXPECT_EQ(Split("a   b"), (V{"a", "  ", " b"}));        // the last space goes with the word
  EXPECT_EQ(Split("a\n\nb"), (V{"a", "\n", "\n", "b"}));  // \s+(?!\S) then \s+
  EXPECT_EQ(Split("a\tb"), (V{"a", "\t", "b"}));
  EXPECT_EQ(Split("hi   "), (V{"hi", "   "}));  // trailing run stays whole
  EXPECT_EQ(Split("  x"), (V{" ", " x"}));
  EXPECT_EQ(Split(" "), (V{" "}));
  EXPECT_EQ(Split("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(Split("x\xC2\xA0y"), (V{"x", "\xC2\xA0", "y"}));  // NBSP is \s but not ' '
}

TEST(SplitGpt2Test, PiecesCoverRandomInput) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::string alphabet[] = {
      "a",        "Z",        " ",    "  ",   "\n",       "\t",           "'",
      "'s",       "1",        "!",    ".",    "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
      "\xC2\xA0", "\xCC\x81", "\xE2", "\x80", "\xFF"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 20);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % std::size(alphabet)];
    std::string joined;
    for (std::string_view p : SplitGpt2(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
  }
}

}  // namespace
}  // namespace waav::text
