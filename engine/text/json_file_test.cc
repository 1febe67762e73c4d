#include "engine/text/json_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace waav::text {
namespace {

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = testing::TempDir() + "/json_file_test_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(JsonFileTest, ParsesAFile) {
  const std::string path = WriteTemp("ok.json", R"({"a": [1, 2, {"b": "c"}]})");
  absl::StatusOr<nlohmann::json> j = ReadJsonFile(path);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][2]["b"], "c");
}

TEST(JsonFileTest, Errors) {
  EXPECT_EQ(ReadJsonFile("/nonexistent/x.json").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadJsonFile(testing::TempDir()).status().code(), absl::StatusCode::kInvalidArgument);
  struct Case {
    const char* name;
    std::string content;
    const char* message;
  };
  const Case cases[] = {
      {"empty.json", "", "empty file"},
      {"truncated.json", R"({"a": [1, 2)", "not valid JSON"},
      {"garbage.json", "hello", "not valid JSON"},
      {"trailing.json", "{} x", "not valid JSON"},
      {"bad_utf8.json", "[\"\xC3\"]", "not valid JSON"},
      {"deep.json", std::string(100, '[') + std::string(100, ']'), "nesting deeper"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteTemp(c.name, c.content);
    absl::StatusOr<nlohmann::json> j = ReadJsonFile(path);
    ASSERT_FALSE(j.ok()) << c.name;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(j.status().message().find(path), std::string::npos) << j.status();
    EXPECT_NE(j.status().message().find(c.message), std::string::npos) << j.status();
  }
  // Brackets inside strings do not count towards the depth.
  EXPECT_TRUE(ParseJson("[\"" + std::string(100, '[') + "\\\"\"]", "inline").ok());
  JsonLimits small;
  small.max_bytes = 4;
  EXPECT_FALSE(ReadJsonFile(WriteTemp("big.json", "[1, 2, 3]"), small).ok());
}

TEST(JsonFileTest, JsonIntChecksTypeAndRange) {
  EXPECT_EQ(*JsonInt(nlohmann::json(5), 0, 10, "f", "x"), 5);
  EXPECT_EQ(*JsonInt(nlohmann::json(-3), -5, 10, "f", "x"), -3);
  EXPECT_FALSE(JsonInt(nlohmann::json(11), 0, 10, "f", "x").ok());
  EXPECT_FALSE(JsonInt(nlohmann::json(-1), 0, 10, "f", "x").ok());
  EXPECT_FALSE(JsonInt(nlohmann::json(1.5), 0, 10, "f", "x").ok());
  EXPECT_FALSE(JsonInt(nlohmann::json("1"), 0, 10, "f", "x").ok());
  EXPECT_FALSE(JsonInt(nlohmann::json(18446744073709551615ull), 0, 10, "f", "x").ok());
}

}  // namespace
}  // namespace waav::text
