#include "engine/models/ct2/whisper_files.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace waav::ct2 {
namespace {

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = testing::TempDir() + "/whisper_files_test_" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

TEST(WhisperConfigTest, ParsesAllFields) {
  const std::string path = WriteTemp("good.json", R"({
    "alignment_heads": [[1, 0], [2, 5]],
    "lang_ids": [50259, 50260],
    "suppress_ids": [1, 2, 7],
    "suppress_ids_begin": [220, 50256],
    "something_new": {"ignored": true}
  })");
  absl::StatusOr<WhisperConfig> c = LoadWhisperConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->alignment_heads, (std::vector<std::pair<int, int>>{{1, 0}, {2, 5}}));
  EXPECT_EQ(c->lang_ids, (std::vector<int>{50259, 50260}));
  EXPECT_EQ(c->suppress_ids, (std::vector<int>{1, 2, 7}));
  EXPECT_EQ(c->suppress_ids_begin, (std::vector<int>{220, 50256}));
}

TEST(WhisperConfigTest, MissingFieldsAreEmpty) {
  absl::StatusOr<WhisperConfig> c = LoadWhisperConfig(WriteTemp("empty_obj.json", "{}"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->suppress_ids.empty());
  EXPECT_TRUE(c->alignment_heads.empty());
}

TEST(WhisperConfigTest, RejectsBadFiles) {
  EXPECT_EQ(LoadWhisperConfig("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
  struct Case {
    const char* name;
    std::string content;
    const char* message;
  };
  const Case cases[] = {
      {"empty.json", "", "empty file"},
      {"truncated.json", R"({"suppress_ids": [1, 2)", "not valid JSON"},
      {"not_json.json", "suppress_ids = [1]", "not valid JSON"},
      {"array.json", "[1, 2]", "not an object"},
      {"ids_string.json", R"({"suppress_ids": "1 2"})", "'suppress_ids' must be a list"},
      {"id_negative.json", R"({"lang_ids": [50259, -1]})", "lang_ids[1] is -1"},
      {"id_float.json", R"({"suppress_ids_begin": [220.5]})", "must be an integer"},
      {"id_huge.json", R"({"suppress_ids": [99999999999]})", "outside"},
      {"heads_flat.json", R"({"alignment_heads": [1, 0]})", "alignment_heads[0] must be"},
      {"heads_triple.json", R"({"alignment_heads": [[1, 0, 2]]})", "[layer, head] pair"},
      {"heads_string.json", R"({"alignment_heads": [["1", 0]]})", "alignment_heads[0] layer"},
      {"deep.json", "{\"a\":" + std::string(20, '[') + std::string(20, ']') + "}", "nesting"},
      {"big.json", "{\"a\": \"" + std::string(2 << 20, 'x') + "\"}", "limit"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteTemp(c.name, c.content);
    absl::StatusOr<WhisperConfig> config = LoadWhisperConfig(path);
    ASSERT_FALSE(config.ok()) << c.name;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(config.status().message().find(path), std::string::npos) << config.status();
    EXPECT_NE(config.status().message().find(c.message), std::string::npos)
        << c.name << ": " << config.status();
  }
}

TEST(WhisperModelFilesTest, FindsFiles) {
  const std::string dir = testing::TempDir() + "/whisper_files_test_model";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/model.bin");
  EXPECT_EQ(FindWhisperModelFiles(dir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FindWhisperModelFiles(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir + "/model.bin") << "x";
  std::ofstream(dir + "/config.json") << "{}";
  absl::StatusOr<WhisperModelFiles> files = FindWhisperModelFiles(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->model_bin, dir + "/model.bin");
  EXPECT_EQ(files->config_json, dir + "/config.json");
  EXPECT_EQ(files->tokenizer_json, "");
}

TEST(WhisperConfigTest, RealTinyEnConfig) {
  const char* models = std::getenv("WAAV_MODELS_DIR");
  const std::string dir = std::string(models ? models : "") + "/whisper-tiny.en";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  absl::StatusOr<WhisperModelFiles> files = FindWhisperModelFiles(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_FALSE(files->tokenizer_json.empty());
  absl::StatusOr<WhisperConfig> c = LoadWhisperConfig(files->config_json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->suppress_ids_begin, (std::vector<int>{220, 50256}));
  EXPECT_EQ(c->lang_ids.size(), 98u);
  EXPECT_EQ(c->lang_ids.front(), 50259);
  EXPECT_EQ(c->alignment_heads.size(), 8u);
  EXPECT_EQ(c->alignment_heads.front(), (std::pair<int, int>{1, 0}));
  EXPECT_EQ(c->suppress_ids.size(), 90u);
  EXPECT_EQ(c->suppress_ids.back(), 50361);
}

}  // namespace
}  // namespace waav::ct2
