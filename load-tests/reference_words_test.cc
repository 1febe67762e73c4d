// Reference word times: `waav transcribe --json --word-timestamps` output parsed, bad files
// refused with the line and the reason (latencies measured from them: stream_record_test).
#include "load-tests/reference_words.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace waav::load {
namespace {

using ::testing::HasSubstr;

// Two files as `waav transcribe --json --word-timestamps a/jfk.wav b.wav` prints them.
constexpr char kTwoFiles[] =
    R"({"file": "a/jfk.wav", "duration_s": 2.0, "text": "And so, and so", "segments": [)"
    R"({"start": 0.00, "end": 1.0, "text": " And so,", "words": [)"
    R"({"word": " And", "start": 0.00, "end": 0.30, "probability": 0.9}, )"
    R"({"word": " so,", "start": 0.30, "end": 0.62, "probability": 0.9}]}, )"
    R"({"start": 1.0, "end": 2.0, "text": " and so", "words": [)"
    R"({"word": " and", "start": 1.00, "end": 1.25, "probability": 0.9}, )"
    R"({"word": " so", "start": 1.25, "end": 1.5, "probability": 0.9}]}]})"
    "\n\n"
    R"({"file": "b.wav", "duration_s": 0.5, "text": "", "segments": []})"
    "\n";

TEST(ReferenceWordsTest, ParsesTranscribeOutput) {
  const absl::StatusOr<ReferenceWords> r = ParseReferenceWords(kTwoFiles);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  const std::vector<ReferenceWord>& jfk = r->at("jfk.wav");
  ASSERT_EQ(jfk.size(), 4u);
  EXPECT_EQ(jfk[0].text, "and");
  EXPECT_EQ(jfk[0].end_ms, 300u);
  EXPECT_EQ(jfk[1].text, "so");  // normalised as waav-load normalises every word
  EXPECT_EQ(jfk[1].end_ms, 620u);
  EXPECT_EQ(jfk[3].end_ms, 1500u);
  EXPECT_TRUE(r->at("b.wav").empty());
  EXPECT_EQ(FileNameOf("x/y/z.wav"), "z.wav");
  EXPECT_EQ(FileNameOf("z.wav"), "z.wav");
  const absl::StatusOr<ReferenceWords> empty = ParseReferenceWords("\n  \n");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// Truncated, corrupt and wrong-type input: refused, naming the line and what is wrong.
TEST(ReferenceWordsTest, BadInputIsRefusedWithTheLine) {
  const std::string good = std::string(kTwoFiles);
  const std::string truncated = good.substr(0, good.size() / 2);
  const struct {
    std::string text;
    std::string message;
  } cases[] = {
      {truncated, "line 1: not JSON"},
      {"{\"file\": \"a.wav\", \"segments\": [}\n", "line 1: not JSON"},
      {"\xff\xfe{}\n", "line 1: not JSON"},
      {"[1, 2]\n", "line 1: not a JSON object"},
      {"{\"segments\": []}\n", "\"file\" is missing"},
      {"{\"file\": 7, \"segments\": []}\n", "\"file\" is missing or not a file name"},
      {"{\"file\": \"dir/\", \"segments\": []}\n", "names a folder"},
      {"{\"file\": \"a.wav\"}\n", "no \"segments\" array"},
      {"{\"file\": \"a.wav\", \"segments\": {}}\n", "no \"segments\" array"},
      {"{\"file\": \"a.wav\", \"segments\": [3]}\n", "segment 0 is not an object"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"text\": \"hi\"}]}\n",
       "segment 0 has no \"words\" array"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"words\": [{\"end\": 1}]}]}\n",
       "segment 0, word 0: \"word\" is missing"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"words\": [{\"word\": \"a\", \"end\": \"1\"}]}]}\n",
       "\"end\" is missing or not a number"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"words\": [{\"word\": \"a\", \"end\": -1}]}]}\n",
       "is not a time in seconds"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"words\": [{\"word\": \"a\", \"end\": 1e300}]}]}\n",
       "is not a time in seconds"},
      {"{\"file\": \"a.wav\", \"segments\": [{\"words\": [{\"word\": \"a\", \"end\": 2}, "
       "{\"word\": \"b\", \"end\": 1}]}]}\n",
       "word 1 ends at 1000 ms, before the word before it (2000 ms)"},
      {good + "{\"file\": \"other/jfk.wav\", \"segments\": []}\n", "line 4: jfk.wav appears twice"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<ReferenceWords> r = ParseReferenceWords(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(ReferenceWordsTest, LoadNamesTheFile) {
  const absl::StatusOr<ReferenceWords> missing = LoadReferenceWords("/nonexistent/words.jsonl");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "/reference_words_test.jsonl";
  {
    std::ofstream out(path);
    out << "{\"file\": \"a.wav\"\n";
  }
  const absl::StatusOr<ReferenceWords> bad = LoadReferenceWords(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 1"));
  {
    std::ofstream out(path);
    out << kTwoFiles;
  }
  const absl::StatusOr<ReferenceWords> good = LoadReferenceWords(path);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->size(), 2u);
  // Oversized: refused before it is parsed.
  {
    std::ofstream out(path);
    const std::string line(1 << 20, ' ');
    for (int i = 0; i < 65; ++i) out << line << '\n';
  }
  const absl::StatusOr<ReferenceWords> big = LoadReferenceWords(path);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("larger than 64 MiB"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace waav::load
