#include "engine/models/ct2/model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace waav::ct2 {
namespace {

// ---- A writer for synthetic model.bin files -------------------------------------------------

struct SynthVariable {
  std::string name;
  std::vector<uint32_t> dims;
  uint8_t dtype;  // VarType code (version >= 4) or item size (version <= 3)
  std::string payload;
};

struct SynthModel {
  uint32_t version = 6;
  std::string spec = "TestSpec";
  uint32_t revision = 2;
  std::vector<SynthVariable> variables;
  std::vector<std::pair<std::string, std::string>> aliases;
};

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) {
    for (int k = 0; k < 2; ++k) U8(static_cast<uint8_t>(v >> (8 * k)));
  }
  void U32(uint32_t v) {
    for (int k = 0; k < 4; ++k) U8(static_cast<uint8_t>(v >> (8 * k)));
  }
  void Str(const std::string& s) {
    U16(static_cast<uint16_t>(s.size() + 1));
    out_ += s;
    out_.push_back('\0');
  }
  void Raw(const std::string& s) { out_ += s; }
  size_t size() const { return out_.size(); }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// Serialises `m` as CTranslate2 would. `offsets` (optional) receives the byte offset of each
// variable's rank field, dtype field and the alias count, for targeted corruption.
struct Offsets {
  std::vector<size_t> rank, dtype;
  size_t var_count = 0, alias_count = 0;
};

std::string Serialize(const SynthModel& m, Offsets* offsets = nullptr) {
  Offsets o;
  Writer w;
  w.U32(m.version);
  if (m.version >= 2) {
    w.Str(m.spec);
    w.U32(m.revision);
  }
  o.var_count = w.size();
  w.U32(static_cast<uint32_t>(m.variables.size()));
  for (const SynthVariable& v : m.variables) {
    w.Str(v.name);
    o.rank.push_back(w.size());
    w.U8(static_cast<uint8_t>(v.dims.size()));
    for (uint32_t d : v.dims) w.U32(d);
    o.dtype.push_back(w.size());
    w.U8(v.dtype);
    if (m.version >= 4) {
      w.U32(static_cast<uint32_t>(v.payload.size()));
    } else {
      const size_t item_size = v.dtype == 0 ? 1 : v.dtype;         // 0 only in bad-version tests
      w.U32(static_cast<uint32_t>(v.payload.size() / item_size));  // element count
    }
    w.Raw(v.payload);
  }
  o.alias_count = w.size();
  if (m.version >= 3) {
    w.U32(static_cast<uint32_t>(m.aliases.size()));
    for (const auto& [alias, target] : m.aliases) {
      w.Str(alias);
      w.Str(target);
    }
  }
  if (offsets != nullptr) *offsets = o;
  return w.str();
}

std::string Bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

// f16 [2, 3], f32 [4], i8/i16/i32 scalars, an f32 [0, 5] empty tensor, one alias.
SynthModel SmallModel() {
  SynthModel m;
  m.variables = {
      {"enc/weight", {2, 3}, 4, std::string(12, '\x3c')},
      {"enc/bias", {4}, 0, std::string(16, '\0')},
      {"flag", {}, 1, Bytes({0xFF})},
      {"num_heads", {}, 2, Bytes({0x06, 0x00})},
      {"big", {}, 3, Bytes({0xFE, 0xFF, 0xFF, 0xFF})},
      {"empty", {0, 5}, 0, ""},
  };
  m.aliases = {{"dec/weight", "enc/weight"}};
  return m;
}

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "/model_file_test_" + name;
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

absl::StatusOr<ModelFile> OpenBytes(const std::string& bytes, const std::string& name = "m.bin") {
  return ModelFile::Open(WriteTemp(name, bytes));
}

// Expects an error of `code` whose message names the file and contains `what`.
void ExpectError(const std::string& bytes, absl::StatusCode code, const std::string& what) {
  const std::string path = WriteTemp("bad.bin", bytes);
  absl::StatusOr<ModelFile> f = ModelFile::Open(path);
  ASSERT_FALSE(f.ok()) << "expected an error containing '" << what << "'";
  EXPECT_EQ(f.status().code(), code) << f.status();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find(what), std::string::npos) << f.status();
}

// ---- Good files ---------------------------------------------------------------------------

TEST(ModelFileTest, ParsesSyntheticFile) {
  absl::StatusOr<ModelFile> f = OpenBytes(Serialize(SmallModel()));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 6);
  EXPECT_EQ(f->spec_name(), "TestSpec");
  EXPECT_EQ(f->spec_revision(), 2);
  EXPECT_EQ(f->num_variables(), 6u);
  EXPECT_EQ(f->Names(), (std::vector<std::string>{"enc/weight", "enc/bias", "flag", "num_heads",
                                                  "big", "empty", "dec/weight"}));

  absl::StatusOr<const Variable*> w = f->GetTensor("enc/weight", {2, 3});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->type, VarType::kF16);
  EXPECT_EQ((*w)->numel(), 6);
  ASSERT_EQ((*w)->bytes.size(), 12u);
  EXPECT_EQ((*w)->bytes[0], 0x3c);
  EXPECT_EQ(*f->Get("dec/weight"), *w);  // the alias is the same variable

  EXPECT_EQ(*f->GetScalarInt("flag"), -1);
  EXPECT_EQ(*f->GetScalarInt("num_heads"), 6);
  EXPECT_EQ(*f->GetScalarInt("big"), -2);
  absl::StatusOr<const Variable*> e = f->GetTensor("empty", {0, 5}, {VarType::kF32});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->numel(), 0);
}

TEST(ModelFileTest, CheckedAccessorsExplainMismatches) {
  const std::string path = WriteTemp("acc.bin", Serialize(SmallModel()));
  absl::StatusOr<ModelFile> f = ModelFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();

  absl::Status s = f->Get("nope/weight").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("nope/weight"), std::string::npos) << s;

  s = f->GetTensor("enc/weight", {3, 2}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("f16[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[3, 2]"), std::string::npos) << s;
  s = f->GetTensor("enc/weight", {2, 3}, {VarType::kF32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(f->GetScalarInt("enc/bias").ok());  // a tensor, not a scalar
  EXPECT_FALSE(f->GetTensor("nope", {1}).ok());
}

TEST(ModelFileTest, WrongSpecIsRejectedWhenAsked) {
  const std::string path = WriteTemp("spec.bin", Serialize(SmallModel()));
  EXPECT_TRUE(ModelFile::Open(path, "TestSpec").ok());
  absl::Status s = ModelFile::Open(path, "WhisperSpec").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'TestSpec', expected 'WhisperSpec'"), std::string::npos) << s;
}

TEST(ModelFileTest, ReadsOlderVersions) {
  for (uint32_t version = 1; version <= 6; ++version) {
    SCOPED_TRACE(testing::Message() << "version " << version);
    SynthModel m = SmallModel();
    m.version = version;
    if (version <= 3) {
      // Item sizes, not dtype codes: 4 = f32, 2 = i16, 1 = i8.
      m.variables = {{"w", {2, 2}, 4, std::string(16, '\0')},
                     {"n", {}, 2, Bytes({0x05, 0x00})},
                     {"b", {}, 1, Bytes({0x01})}};
      m.aliases = {{"w2", "w"}};
    }
    if (version <= 2) m.aliases.clear();
    absl::StatusOr<ModelFile> f = OpenBytes(Serialize(m));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->version(), static_cast<int>(version));
    EXPECT_EQ(f->spec_name(), version >= 2 ? "TestSpec" : "");
    EXPECT_EQ(f->spec_revision(), version >= 2 ? 2 : 1);
    if (version <= 3) {
      EXPECT_EQ((*f->Get("w"))->type, VarType::kF32);
      EXPECT_EQ(*f->GetScalarInt("n"), 5);
      EXPECT_EQ((*f->Get("b"))->type, VarType::kI8);
      EXPECT_EQ(f->Get("w2").ok(), version == 3);
    }
  }
}

TEST(ModelFileTest, VariablesSurviveMoves) {
  absl::StatusOr<ModelFile> f = OpenBytes(Serialize(SmallModel()));
  ASSERT_TRUE(f.ok()) << f.status();
  const Variable* w = *f->Get("enc/weight");
  ModelFile moved = *std::move(f);
  std::vector<ModelFile> holder;
  holder.push_back(std::move(moved));
  EXPECT_EQ(*holder[0].Get("enc/weight"), w);
  EXPECT_EQ(w->bytes[11], 0x3c);
}

// ---- Bad files ----------------------------------------------------------------------------

TEST(ModelFileTest, MissingEmptyAndDirectory) {
  absl::Status s = ModelFile::Open(TempPath("does_not_exist.bin")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("does_not_exist.bin"), std::string::npos) << s;
  ExpectError("", absl::StatusCode::kDataLoss, "empty file");
  EXPECT_EQ(ModelFile::Open(testing::TempDir()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelFileTest, EveryTruncationFails) {
  for (uint32_t version : {1u, 2u, 3u, 6u}) {
    SynthModel m = SmallModel();
    m.version = version;
    if (version <= 3) {
      m.variables = {{"w", {2}, 4, std::string(8, '\1')}, {"n", {}, 2, "ab"}};
      m.aliases = {{"w2", "w"}};
    }
    if (version <= 2) m.aliases.clear();
    const std::string full = Serialize(m);
    ASSERT_TRUE(OpenBytes(full).ok());
    for (size_t n = 0; n < full.size(); ++n) {
      absl::StatusOr<ModelFile> f = OpenBytes(full.substr(0, n), "trunc.bin");
      ASSERT_FALSE(f.ok()) << "version " << version << " prefix of " << n << " bytes";
      ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
      const std::string msg(f.status().message());
      ASSERT_TRUE(msg.find(" at byte ") != std::string::npos ||
                  (n == 0 && msg.find("empty file") != std::string::npos))
          << f.status();
    }
  }
}

TEST(ModelFileTest, UnsupportedVersions) {
  for (uint32_t version : {0u, 7u, 0xFFFFFFFFu}) {
    SynthModel m = SmallModel();
    m.version = version;
    ExpectError(Serialize(m), absl::StatusCode::kInvalidArgument, "unsupported");
  }
}

TEST(ModelFileTest, CorruptFields) {
  Offsets o;
  const std::string good = Serialize(SmallModel(), &o);
  const auto patched = [&](size_t at, std::initializer_list<int> bytes) {
    std::string s = good;
    size_t k = at;
    for (int b : bytes) s[k++] = static_cast<char>(b);
    return s;
  };
  ExpectError(patched(o.rank[0], {9}), absl::StatusCode::kDataLoss, "rank 9");
  ExpectError(patched(o.rank[0], {200}), absl::StatusCode::kDataLoss, "rank 200");
  ExpectError(patched(o.dtype[0], {6}), absl::StatusCode::kDataLoss, "unknown dtype code 6");
  ExpectError(patched(o.dtype[0], {255}), absl::StatusCode::kDataLoss, "unknown dtype");
  ExpectError(patched(o.dtype[1], {4}), absl::StatusCode::kDataLoss, "needs 8");  // f32→f16
  ExpectError(patched(o.dtype[0] + 1, {13}), absl::StatusCode::kDataLoss, "stores 13 bytes");
  ExpectError(patched(o.dtype[0] + 1, {11}), absl::StatusCode::kDataLoss, "stores 11 bytes");
  ExpectError(patched(o.var_count, {0xFF, 0xFF, 0xFF, 0x7F}), absl::StatusCode::kDataLoss,
              "variable count");
  ExpectError(patched(o.alias_count, {0xFF, 0xFF, 0xFF, 0xFF}), absl::StatusCode::kDataLoss,
              "alias count");
  ExpectError(patched(o.var_count, {5}), absl::StatusCode::kDataLoss, "");  // one too few
  ExpectError(patched(o.var_count, {7}), absl::StatusCode::kDataLoss, "");  // one too many
  // Huge dimensions must not overflow the element count: [2^32-1, 2^32-1].
  ExpectError(patched(o.rank[0] + 1, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}),
              absl::StatusCode::kDataLoss, "");
  // Strings: zero length, missing NUL, embedded NUL (the spec name starts at byte 4).
  ExpectError(patched(4, {0, 0}), absl::StatusCode::kDataLoss, "length 0");
  ExpectError(patched(4 + 2 + 8, {'X'}), absl::StatusCode::kDataLoss, "not NUL-terminated");
  ExpectError(patched(4 + 2 + 3, {0}), absl::StatusCode::kDataLoss, "contains a NUL");
  ExpectError(patched(4, {0xFF, 0xFF}), absl::StatusCode::kDataLoss, "truncated");
  ExpectError(good + "x", absl::StatusCode::kDataLoss, "1 unexpected trailing bytes");
}

TEST(ModelFileTest, DuplicateNamesAndBadAliases) {
  SynthModel dup = SmallModel();
  dup.variables[2].name = "enc/weight";
  ExpectError(Serialize(dup), absl::StatusCode::kDataLoss, "'enc/weight' is a duplicate");

  SynthModel missing = SmallModel();
  missing.aliases = {{"dec/weight", "enc/nothing"}};
  ExpectError(Serialize(missing), absl::StatusCode::kDataLoss,
              "points to missing variable 'enc/nothing'");

  SynthModel shadow = SmallModel();
  shadow.aliases = {{"enc/bias", "enc/weight"}};
  ExpectError(Serialize(shadow), absl::StatusCode::kDataLoss, "repeats an existing name");
}

// Random byte damage: every outcome is either a clean parse whose spans lie inside the file or
// an error; never a crash (run the debug preset for ASan/UBSan coverage).
TEST(ModelFileTest, RandomCorruptionNeverCrashes) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::string good = Serialize(SmallModel());
  int parsed = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string s = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    absl::StatusOr<ModelFile> f = OpenBytes(s, "fuzz.bin");
    if (!f.ok()) continue;
    ++parsed;
    uint64_t total = 0;
    for (const std::string& name : f->Names()) {
      const Variable* v = *f->Get(name);
      ASSERT_EQ(v->bytes.size(), static_cast<size_t>(v->numel()) * VarTypeSize(v->type));
      for (uint8_t b : v->bytes) total += b;
    }
    (void)total;
  }
  std::cout << parsed << " of 1500 damaged files still parsed\n";
}

// ---- The real Whisper tiny.en model.bin ---------------------------------------------------

TEST(RealModelFileTest, WhisperTinyEn) {
  const char* dir = std::getenv("WAAV_MODELS_DIR");
  const std::string path = std::string(dir ? dir : "") + "/whisper-tiny.en/model.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (run scripts/setup)";

  std::vector<double> times_ms;
  std::optional<ModelFile> file;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ModelFile> f = ModelFile::Open(path, "WhisperSpec");
    times_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    ASSERT_TRUE(f.ok()) << f.status();
    file.emplace(*std::move(f));
  }
  std::sort(times_ms.begin(), times_ms.end());
  std::cout << "ModelFile::Open(model.bin): first " << times_ms.front() << " ms, median "
            << times_ms[2] << " ms (5 runs)\n";
  RecordProperty("open_ms_median", std::to_string(times_ms[2]));

  EXPECT_EQ(file->version(), 6);
  EXPECT_EQ(file->spec_name(), "WhisperSpec");
  EXPECT_EQ(file->num_variables(), 148u);
  EXPECT_EQ(*file->GetScalarInt("decoder/num_heads"), 6);
  EXPECT_EQ(*file->GetScalarInt("encoder/num_heads"), 6);
  EXPECT_EQ(*file->GetScalarInt("decoder/alignment_layer"), -1);  // i16, sign-extended
  absl::StatusOr<const Variable*> emb =
      file->GetTensor("decoder/embeddings/weight", {51864, 384}, {VarType::kF16});
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ((*emb)->bytes.size(), 51864u * 384u * 2u);
  // The output projection is stored as an alias of the embedding.
  EXPECT_EQ(*file->Get("decoder/projection/weight"), *emb);
  // Every payload is readable (touch every page once).
  uint64_t sum = 0;
  for (const std::string& name : file->Names()) {
    const Variable* v = *file->Get(name);
    for (size_t k = 0; k < v->bytes.size(); k += 4096) sum += v->bytes[k];
  }
  EXPECT_GT(sum, 0u);
}

}  // namespace
}  // namespace waav::ct2
