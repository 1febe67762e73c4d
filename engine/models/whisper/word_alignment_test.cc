// The host-side pieces of word alignment on small hand-computed cases: the median filter, the
// column standardisation, DTW, word splitting and faster-whisper's clean-ups, and the
// alignment-heads reader on good and bad config.json files.
#include "engine/models/whisper/word_alignment.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_en_vocabulary.h"

namespace waav::whisper {
namespace {

namespace fs = std::filesystem;

TEST(MedianFilterRowsTest, HandComputedWidth3) {
  // Row [1, 5, 2, 8, 3] mirrored: 5 1 5 2 8 3 8.
  const std::vector<float> m = {1, 5, 2, 8, 3};
  EXPECT_EQ(MedianFilterRows(m, 1, 5, 3), (std::vector<float>{5, 2, 5, 3, 8}));
}

TEST(MedianFilterRowsTest, HandComputedWidth7TwoRows) {
  // Row 0: 0..7 mirrored at both ends; position 0 sees {3 2 1 0 1 2 3} -> 2, position 6 sees
  // {3 4 5 6 7 6 5} -> 5. Row 1: a single spike is removed.
  const std::vector<float> m = {0, 1, 2, 3, 4, 5, 6, 7,  //
                                0, 0, 0, 9, 0, 0, 0, 0};
  const std::vector<float> got = MedianFilterRows(m, 2, 8, 7);
  const std::vector<float> want = {2, 2, 2, 3, 4, 5, 5, 5,  //
                                   0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(got, want);
}

TEST(MedianFilterRowsTest, ShortRowsAndWidthOneUnchanged) {
  const std::vector<float> m = {3, 1, 2};
  EXPECT_EQ(MedianFilterRows(m, 1, 3, 7), m);  // 3 values ≤ 7 / 2: nothing to mirror
  EXPECT_EQ(MedianFilterRows(m, 1, 3, 1), m);
}

// Widths 3 and 5 (nth_element) and 7 (the comparator network), rows from just long enough to
// mirror (width / 2 + 1 values, mirrored at both ends at once) to longer than a vector register.
TEST(MedianFilterRowsTest, RandomAgainstDirectDefinition) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  for (int width : {3, 5, 7}) {
    const int half = width / 2;
    for (int cols = half + 1; cols < 40; cols += 1 + static_cast<int>(rng() % 4)) {
      const int rows = 1 + static_cast<int>(rng() % 3);
      std::vector<float> m(static_cast<size_t>(rows * cols));
      for (float& v : m) v = value(rng);
      if (cols % 3 == 0) m[0] = m[static_cast<size_t>(cols - 1)];  // ties
      const std::vector<float> got = MedianFilterRows(m, rows, cols, width);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          std::vector<float> w;
          for (int k = -half; k <= half; ++k) {
            int at = c + k;
            if (at < 0) at = -at;
            if (at >= cols) at = 2 * cols - 2 - at;
            w.push_back(m[static_cast<size_t>(r * cols + at)]);
          }
          std::sort(w.begin(), w.end());
          ASSERT_EQ(got[static_cast<size_t>(r * cols + c)], w[static_cast<size_t>(half)])
              << "width " << width << ", cols " << cols << ", at " << r << "," << c;
        }
      }
    }
  }
}

TEST(StandardizeColumnsTest, HandComputed) {
  // Column 0: {1, 3} -> mean 2, population std 1 -> {-1, 1}. Column 1: constant -> zeros.
  std::vector<float> m = {1, 5,  //
                          3, 5};
  StandardizeColumns(absl::MakeSpan(m), 2, 2);
  EXPECT_EQ(m, (std::vector<float>{-1, 0, 1, 0}));
  // {0, 0, 6}: mean 2, std sqrt(8) -> {-2/sqrt(8), -2/sqrt(8), 4/sqrt(8)}.
  std::vector<float> c = {0, 0, 6};
  StandardizeColumns(absl::MakeSpan(c), 3, 1);
  EXPECT_NEAR(c[0], -2 / std::sqrt(8.0), 1e-6);
  EXPECT_NEAR(c[2], 4 / std::sqrt(8.0), 1e-6);
}

std::vector<std::pair<int, int>> Pairs(const std::vector<PathPoint>& path) {
  std::vector<std::pair<int, int>> out;
  for (const PathPoint& p : path) out.emplace_back(p.row, p.col);
  return out;
}

TEST(DtwPathTest, DiagonalWhenCheapest) {
  const std::vector<float> cost = {0, 9, 9,  //
                                   9, 0, 9,  //
                                   9, 9, 0};
  EXPECT_EQ(Pairs(DtwPath(cost, 3, 3)), (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 2}}));
}

TEST(DtwPathTest, FollowsCheapCellsHandComputed) {
  // 2 tokens over 4 frames. Path totals: row 0: 1 2 12 22; row 1: 11 2 3 4. At (1, 2) the
  // diagonal (2) ties with the left neighbour (2): the reference takes the left one.
  const std::vector<float> cost = {1,  1, 10, 10,  //
                                   10, 1, 1,  1};
  EXPECT_EQ(Pairs(DtwPath(cost, 2, 4)),
            (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {1, 2}, {1, 3}}));
}

TEST(DtwPathTest, MoreRowsThanColumns) {
  // 3 tokens, 1 frame: down twice.
  const std::vector<float> cost = {1, 2, 3};
  EXPECT_EQ(Pairs(DtwPath(cost, 3, 1)), (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_TRUE(DtwPath({}, 0, 0).empty());
}

TEST(DtwPathTest, RandomPathsAreMonotonicAndOptimal) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  // Continuous values: no ties, so the reference's tie rule cannot leave the optimum.
  std::uniform_real_distribution<float> value(0, 10);
  for (int trial = 0; trial < 20; ++trial) {
    const int rows = 1 + static_cast<int>(rng() % 5), cols = 1 + static_cast<int>(rng() % 7);
    std::vector<float> cost(static_cast<size_t>(rows * cols));
    for (float& v : cost) v = static_cast<float>(value(rng));
    const std::vector<PathPoint> path = DtwPath(cost, rows, cols);
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(path.front().row, 0);
    EXPECT_EQ(path.front().col, 0);
    EXPECT_EQ(path.back().row, rows - 1);
    EXPECT_EQ(path.back().col, cols - 1);
    float total = cost[0];
    for (size_t i = 1; i < path.size(); ++i) {
      const int dr = path[i].row - path[i - 1].row, dc = path[i].col - path[i - 1].col;
      EXPECT_TRUE((dr == 0 || dr == 1) && (dc == 0 || dc == 1) && dr + dc > 0);
      total += cost[static_cast<size_t>(path[i].row * cols + path[i].col)];
    }
    // The optimum by a direct recurrence.
    std::vector<float> best(cost.size());
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        float prev = r == 0 && c == 0 ? 0 : 1e9f;
        if (r > 0) prev = std::min(prev, best[static_cast<size_t>((r - 1) * cols + c)]);
        if (c > 0) prev = std::min(prev, best[static_cast<size_t>(r * cols + c - 1)]);
        if (r > 0 && c > 0)
          prev = std::min(prev, best[static_cast<size_t>((r - 1) * cols + c - 1)]);
        best[static_cast<size_t>(r * cols + c)] = prev + cost[static_cast<size_t>(r * cols + c)];
      }
    }
    EXPECT_NEAR(total, best.back(), 1e-4);
  }
}

TimedWord Word(const std::string& text, int begin, int end, int start_ms, int end_ms) {
  return {text, begin, end, start_ms, end_ms};
}

TEST(PostProcessWordsTest, MergesPunctuationKeepingTheWordsTimes) {
  std::vector<TimedWord> words = {Word(" Hello", 0, 1, 0, 300), Word(",", 1, 2, 300, 300),
                                  Word(" (", 2, 3, 300, 300),   Word("world", 3, 4, 300, 600),
                                  Word(")", 4, 5, 600, 600),    Word(").", 5, 6, 600, 600)};
  PostProcessWords(words);
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0].text, " Hello,");
  EXPECT_EQ(words[0].token_begin, 0);
  EXPECT_EQ(words[0].token_end, 2);
  EXPECT_EQ(words[0].end_ms, 300);
  EXPECT_EQ(words[1].text, " (world)");
  EXPECT_EQ(words[1].token_begin, 2);
  EXPECT_EQ(words[1].token_end, 5);
  EXPECT_EQ(words[1].start_ms, 300);
  EXPECT_EQ(words[1].end_ms, 600);
  EXPECT_EQ(words[2].text, ").");  // not one of the trailing marks: a word of its own
}

TEST(PostProcessWordsTest, TruncatesLongWordsAtSentenceEnds) {
  // Durations 200, 200, 1000, 2000, 200: median 200, max 400. "." is long: its end is cut to
  // start + 400; " Then" after it is long: its start moves to end − 400. Then "." merges.
  std::vector<TimedWord> words = {Word(" One", 0, 1, 0, 200), Word(" two", 1, 2, 200, 400),
                                  Word(".", 2, 3, 400, 1400), Word(" Then", 3, 4, 1400, 3400),
                                  Word(" go", 4, 5, 3400, 3600)};
  PostProcessWords(words);
  ASSERT_EQ(words.size(), 4u);
  EXPECT_EQ(words[1].text, " two.");
  EXPECT_EQ(words[2].start_ms, 3000);
  EXPECT_EQ(words[2].end_ms, 3400);
}

TEST(PostProcessWordsTest, ShortensALongFirstWordAfterSilence) {
  // Median 300 (durations 2000, 300, 300): max 600; the first word ends at 2000 > 4 × 300 and
  // lasts 2000 > 600: it starts at 2000 − 600.
  std::vector<TimedWord> words = {Word(" Well", 0, 1, 0, 2000), Word(" then", 1, 2, 2000, 2300),
                                  Word(" go", 2, 3, 2300, 2600)};
  PostProcessWords(words);
  EXPECT_EQ(words[0].start_ms, 1400);
  EXPECT_EQ(words[0].end_ms, 2000);
}

class AlignmentHeadsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("waav-align-heads"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& text) {
    const fs::path path = dir_ / "config.json";
    std::ofstream(path) << text;
    return path.string();
  }
  fs::path dir_;
  WhisperDims dims_;  // 4 decoder layers of 6 heads
};

TEST_F(AlignmentHeadsTest, ReadsPairs) {
  auto heads = ReadAlignmentHeads(Write(R"({"alignment_heads": [[1, 0], [3, 5]]})"), dims_);
  ASSERT_TRUE(heads.ok()) << heads.status();
  ASSERT_EQ(heads->size(), 2u);
  EXPECT_EQ((*heads)[1].layer, 3);
  EXPECT_EQ((*heads)[1].head, 5);
}

TEST_F(AlignmentHeadsTest, BadFilesGiveClearErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"alignment_heads": [[1, 0], [3, )", "config.json"},  // truncated
      {"\x01garbage", "config.json"},                           // corrupt
      {R"([1, 2])", "expected an object"},                      // wrong type
      {R"({"lang_ids": []})", "no \"alignment_heads\""},
      {R"({"alignment_heads": []})", "non-empty array"},
      {R"({"alignment_heads": [[1, 0, 2]]})", "alignment_heads[0]"},
      {R"({"alignment_heads": [["1", 0]]})", "alignment_heads[0] layer"},
      {R"({"alignment_heads": [[4, 0]]})", "alignment_heads[0] layer"},  // 4 layers: 0..3
      {R"({"alignment_heads": [[0, 6]]})", "alignment_heads[0] head"},
  };
  for (const auto& [text, want] : cases) {
    auto heads = ReadAlignmentHeads(Write(text), dims_);
    ASSERT_FALSE(heads.ok()) << text;
    EXPECT_NE(std::string(heads.status().message()).find(want), std::string::npos)
        << text << " -> " << heads.status();
    EXPECT_NE(std::string(heads.status().message()).find("config.json"), std::string::npos)
        << heads.status();
  }
  // Oversized: a huge array of pairs is still read within limits or refused, never a crash.
  std::string big = R"({"alignment_heads": [)";
  for (int i = 0; i < 100000; ++i) big += "[0, 0],";
  big += "[0, 0]]}";
  auto heads = ReadAlignmentHeads(Write(big), dims_);
  EXPECT_TRUE(heads.ok() || !heads.status().message().empty());
  EXPECT_FALSE(ReadAlignmentHeads((dir_ / "absent.json").string(), dims_).ok());
}

TEST(SplitWordsTest, SplitsLikeFasterWhisper) {
  auto loaded = testing::LoadTinyEnVocabulary();
  if (absl::IsNotFound(loaded.status())) GTEST_SKIP() << loaded.status().message();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::unique_ptr<Vocabulary>& vocabulary = *loaded;
  const std::vector<int> tokens =
      vocabulary->tokenizer().Encode(" Printing, in the well-known sense.");
  std::vector<std::string> got;
  for (const TimedWord& w : SplitWords(*vocabulary, tokens)) got.push_back(w.text);
  EXPECT_EQ(got, (std::vector<std::string>{" Printing", ",", " in", " the", " well", "-known",
                                           " sense", "."}));
}

}  // namespace
}  // namespace waav::whisper
