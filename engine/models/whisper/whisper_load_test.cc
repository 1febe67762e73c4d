// Loading a Whisper model folder: good files load; truncated, corrupt or mismatched files give an
// error that names the file, never a crash or a model that produces garbage.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

namespace fs = std::filesystem;

class WhisperLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = waav::testing::TinyEnModelDir();
    if (!dir) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    source_ = *dir;
    auto backend = CreateBackend("cpu", {});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    tmp_ = waav::testing::MakeTempDir("waav-whisper-load");
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  // A model folder in tmp_ whose model.bin is `bytes` and whose tokenizer is the real one.
  std::string FolderWithModelBytes(const std::string& bytes) {
    const fs::path dir = tmp_ / absl::StrCat("model", counter_++);
    fs::create_directories(dir);
    std::ofstream(dir / "model.bin", std::ios::binary) << bytes;
    fs::copy_file(fs::path(source_) / "tokenizer.json", dir / "tokenizer.json");
    return dir.string();
  }
  std::string RealModelBytes() {
    std::ifstream in(fs::path(source_) / "model.bin", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void ExpectLoadError(const std::string& dir, const std::string& must_mention) {
    auto t = Transcriber::Load(dir, *backend_);
    ASSERT_FALSE(t.ok()) << dir;
    EXPECT_NE(std::string(t.status().message()).find(must_mention), std::string::npos)
        << t.status();
  }

  std::string source_;
  fs::path tmp_;
  int counter_ = 0;
  std::unique_ptr<Backend> backend_;
};

TEST_F(WhisperLoadTest, RealModelLoadsWithTinyEnDimensions) {
  auto t = Transcriber::Load(source_, *backend_);
  ASSERT_TRUE(t.ok()) << t.status();
  const WhisperDims& d = (*t)->model().dims();
  EXPECT_EQ(d.d_model, 384);
  EXPECT_EQ(d.n_heads, 6);
  EXPECT_EQ(d.n_encoder_layers, 4);
  EXPECT_EQ(d.n_decoder_layers, 4);
  EXPECT_EQ(d.n_vocab, 51864);
  EXPECT_EQ(d.n_text_ctx, 448);
  EXPECT_EQ(d.n_audio_ctx, 1500);
}

TEST_F(WhisperLoadTest, TruncatedModelFilesAreRejectedWithTheFileName) {
  const std::string bytes = RealModelBytes();
  for (size_t size : {size_t{0}, size_t{3}, size_t{40}, size_t{200}, bytes.size() / 2,
                      bytes.size() - 1}) {
    SCOPED_TRACE(size);
    const std::string dir = FolderWithModelBytes(bytes.substr(0, size));
    ExpectLoadError(dir, "model.bin");
  }
}

TEST_F(WhisperLoadTest, AnotherSpecIsRejected) {
  std::string bytes = RealModelBytes();
  const size_t at = bytes.find("WhisperSpec");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 11, "WhisperSpac");
  ExpectLoadError(FolderWithModelBytes(bytes), "WhisperSpac");
}

TEST_F(WhisperLoadTest, MissingFilesAreNamed) {
  ExpectLoadError((tmp_ / "nowhere").string(), "model.bin");
  const fs::path dir = tmp_ / "no_tokenizer";
  fs::create_directories(dir);
  fs::copy_file(fs::path(source_) / "model.bin", dir / "model.bin");
  ExpectLoadError(dir.string(), "tokenizer.json");
}

TEST_F(WhisperLoadTest, CorruptTokenizerIsRejected) {
  const fs::path dir = tmp_ / "bad_tokenizer";
  fs::create_directories(dir);
  fs::copy_file(fs::path(source_) / "model.bin", dir / "model.bin");
  std::ofstream(dir / "tokenizer.json") << "{\"model\": {\"vocab\": ";
  ExpectLoadError(dir.string(), "tokenizer.json");
}

}  // namespace
}  // namespace waav::whisper
