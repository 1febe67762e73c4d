#include "engine/audio/wav_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/audio/wav_test_util.h"
#include "gtest/gtest.h"

namespace waav::audio {
namespace {

using wav_test::Append;
using wav_test::Bytes;
using wav_test::Chunk;
using wav_test::ExtensibleFmtBody;
using wav_test::Float32;
using wav_test::FmtBody;
using wav_test::kTagFloat;
using wav_test::kTagPcm;
using wav_test::Pcm16;
using wav_test::PutU16;
using wav_test::PutU32;
using wav_test::PutU64;
using wav_test::Riff;
using wav_test::SimpleWav16;

constexpr char kName[] = "test.wav";

Audio ParseOk(const Bytes& bytes) {
  absl::StatusOr<Audio> audio = ParseWav(bytes, kName);
  EXPECT_TRUE(audio.ok()) << audio.status();
  return audio.ok() ? *audio : Audio{};
}

// Expects InvalidArgument whose message starts with the file name and contains `fragment`.
void ExpectInvalid(const Bytes& bytes, const std::string& fragment) {
  absl::StatusOr<Audio> audio = ParseWav(bytes, kName);
  ASSERT_FALSE(audio.ok()) << "parsed although it should fail with: " << fragment;
  EXPECT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument) << audio.status();
  const std::string message(audio.status().message());
  EXPECT_TRUE(absl::StartsWith(message, kName)) << message;
  EXPECT_TRUE(absl::StrContains(message, fragment)) << message;
}

Bytes Pcm24(const std::vector<int32_t>& v) {
  Bytes b;
  for (int32_t s : v) {
    const auto u = static_cast<uint32_t>(s);
    for (int i = 0; i < 3; ++i) b.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  return b;
}
Bytes Pcm32(const std::vector<int32_t>& v) {
  Bytes b;
  for (int32_t s : v) PutU32(b, static_cast<uint32_t>(s));
  return b;
}
Bytes Float64(const std::vector<double>& v) {
  Bytes b;
  for (double d : v) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    PutU64(b, u);
  }
  return b;
}

// ---- Encodings ------------------------------------------------------------------------------

TEST(WavReaderTest, Pcm8IsUnsignedAroundMidpoint) {
  const Bytes data = {0, 1, 127, 128, 129, 255};
  const Audio audio =
      ParseOk(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 8000, 8)), Chunk("data", data)}));
  EXPECT_EQ(audio.sample_rate_hz, 8000);
  const std::vector<float> expected = {-1.0f, -127 / 128.0f, -1 / 128.0f,
                                       0.0f,  1 / 128.0f,    127 / 128.0f};
  EXPECT_EQ(audio.samples, expected);
}

TEST(WavReaderTest, Pcm16Exact) {
  const std::vector<int16_t> v = {-32768, -1, 0, 1, 12345, 32767};
  const Audio audio = ParseOk(SimpleWav16(v, 1, 16000));
  EXPECT_EQ(audio.sample_rate_hz, 16000);
  ASSERT_EQ(audio.samples.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(audio.samples[i], v[i] / 32768.0f) << i;
}

TEST(WavReaderTest, Pcm24SignExtends) {
  const std::vector<int32_t> v = {-8388608, -1, 0, 1, 0x123456, 8388607};
  const Audio audio =
      ParseOk(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 44100, 24)), Chunk("data", Pcm24(v))}));
  EXPECT_EQ(audio.sample_rate_hz, 44100);
  ASSERT_EQ(audio.samples.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(audio.samples[i], static_cast<float>(v[i] / 8388608.0)) << i;
  }
}

TEST(WavReaderTest, Pcm32Exact) {
  const std::vector<int32_t> v = {std::numeric_limits<int32_t>::min(), -1, 0, 1, 123456789,
                                  std::numeric_limits<int32_t>::max()};
  const Audio audio =
      ParseOk(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 22050, 32)), Chunk("data", Pcm32(v))}));
  EXPECT_EQ(audio.sample_rate_hz, 22050);
  ASSERT_EQ(audio.samples.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(audio.samples[i], static_cast<float>(v[i] / 2147483648.0)) << i;
  }
}

TEST(WavReaderTest, Float32KeptAsIsIncludingOutOfRange) {
  const std::vector<float> v = {-1.5f, 0.25f, 1e-20f, 3.0f, -0.0f};
  const Audio audio = ParseOk(wav_test::SimpleWavFloat(v, 1, 48000));
  EXPECT_EQ(audio.sample_rate_hz, 48000);
  EXPECT_EQ(audio.samples, v);
}

TEST(WavReaderTest, Float64RoundedToFloat) {
  const std::vector<double> v = {0.1, -0.7, 1.0 / 3.0};
  const Audio audio =
      ParseOk(Riff({Chunk("fmt ", FmtBody(kTagFloat, 1, 16000, 64)), Chunk("data", Float64(v))}));
  ASSERT_EQ(audio.samples.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(audio.samples[i], static_cast<float>(v[i]));
}

TEST(WavReaderTest, StereoIsAveraged) {
  const std::vector<int16_t> interleaved = {1000, -1000, 32767, 32767, -32768, 0, 3, 4};
  const Audio audio = ParseOk(SimpleWav16(interleaved, 2, 44100));
  ASSERT_EQ(audio.samples.size(), 4u);
  for (size_t f = 0; f < 4; ++f) {
    const double l = interleaved[2 * f] / 32768.0;
    const double r = interleaved[2 * f + 1] / 32768.0;
    EXPECT_EQ(audio.samples[f], static_cast<float>((l + r) / 2)) << f;
  }
}

TEST(WavReaderTest, FiveChannelFloatIsAveraged) {
  const std::vector<float> interleaved = {0.5f, 0.25f, -1.0f, 0.0f, 0.75f,  // frame 0
                                          1.0f, 1.0f,  1.0f,  1.0f, 1.0f};  // frame 1
  const Audio audio = ParseOk(wav_test::SimpleWavFloat(interleaved, 5, 8000));
  ASSERT_EQ(audio.samples.size(), 2u);
  EXPECT_EQ(audio.samples[0], static_cast<float>(0.5 / 5));
  EXPECT_EQ(audio.samples[1], 1.0f);
}

TEST(WavReaderTest, SampleRatesArePreserved) {
  for (int rate : {8000, 11025, 22050, 44100, 48000, 96000}) {
    EXPECT_EQ(ParseOk(SimpleWav16({1, 2, 3}, 1, rate)).sample_rate_hz, rate);
  }
}

TEST(WavReaderTest, ExtensiblePcm24With20ValidBits) {
  // 20-bit samples are left-justified in a 24-bit container: decoding the container is right.
  const std::vector<int32_t> v = {-8388608, 16, -16, 8388592};  // multiples of 16
  const Bytes file =
      Riff({Chunk("fmt ", ExtensibleFmtBody(kTagPcm, 2, 96000, 24, 20)), Chunk("data", Pcm24(v))});
  const Audio audio = ParseOk(file);
  EXPECT_EQ(audio.sample_rate_hz, 96000);
  ASSERT_EQ(audio.samples.size(), 2u);
  EXPECT_EQ(audio.samples[0], static_cast<float>((-8388608 + 16) / 8388608.0 / 2));
  EXPECT_EQ(audio.samples[1], static_cast<float>((-16 + 8388592) / 8388608.0 / 2));
}

TEST(WavReaderTest, ExtensibleFloat32) {
  const std::vector<float> v = {0.125f, -0.5f, 0.875f};
  const Bytes file = Riff({Chunk("fmt ", ExtensibleFmtBody(kTagFloat, 1, 16000, 32, 32)),
                           Chunk("fact", {3, 0, 0, 0}), Chunk("data", Float32(v))});
  EXPECT_EQ(ParseOk(file).samples, v);
}

// ---- Chunk layout ---------------------------------------------------------------------------

TEST(WavReaderTest, SkipsUnknownChunksWithPadding) {
  const Bytes odd_list = {'I', 'N', 'F', 'O', 'x'};  // odd size: followed by a pad byte
  const Bytes file =
      Riff({Chunk("LIST", odd_list), Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16)),
            Chunk("junk", {1, 2, 3}), Chunk("data", Pcm16({7, -7, 100})), Chunk("LIST", odd_list)});
  const Audio audio = ParseOk(file);
  EXPECT_EQ(audio.samples, (std::vector<float>{7 / 32768.0f, -7 / 32768.0f, 100 / 32768.0f}));
}

TEST(WavReaderTest, FmtAfterData) {
  const Bytes file =
      Riff({Chunk("data", Pcm16({5, 6})), Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16))});
  EXPECT_EQ(ParseOk(file).samples.size(), 2u);
}

TEST(WavReaderTest, OddSizedDataChunkFollowedByChunk) {
  // 8-bit mono with 3 samples: the data chunk is odd and padded before the next chunk.
  const Bytes file = Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 8000, 8)),
                           Chunk("data", {128, 0, 255}), Chunk("LIST", {1, 2})});
  EXPECT_EQ(ParseOk(file).samples, (std::vector<float>{0.0f, -1.0f, 127 / 128.0f}));
}

TEST(WavReaderTest, StreamingDataSizesMeanRestOfFile) {
  const Bytes pcm = Pcm16({1, 2, 3, 4});
  for (int64_t declared : {int64_t{0}, int64_t{0xFFFFFFFF}}) {
    const Bytes file =
        Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16)), Chunk("data", pcm, declared)});
    EXPECT_EQ(ParseOk(file).samples.size(), 4u) << "declared data size " << declared;
  }
}

TEST(WavReaderTest, DataSizeBeyondEndIsClamped) {
  const Bytes file =
      Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16)), Chunk("data", Pcm16({1, 2, 3}), 1000)});
  EXPECT_EQ(ParseOk(file).samples.size(), 3u);
}

TEST(WavReaderTest, TruncatedFinalFrameIsDropped) {
  Bytes data = Pcm16({1, 2, 3, 4});  // two stereo frames
  data.push_back(9);                 // and 3 bytes of a third
  data.push_back(9);
  data.push_back(9);
  const Bytes file = Riff({Chunk("fmt ", FmtBody(kTagPcm, 2, 16000, 16)), Chunk("data", data)});
  EXPECT_EQ(ParseOk(file).samples.size(), 2u);
}

TEST(WavReaderTest, WrongRiffSizeIsIgnored) {
  Bytes file = SimpleWav16({1, 2}, 1, 16000);
  file[4] = file[5] = file[6] = file[7] = 0;
  EXPECT_EQ(ParseOk(file).samples.size(), 2u);
}

TEST(WavReaderTest, Rf64UsesDs64DataSize) {
  Bytes ds64;
  PutU64(ds64, 0);  // riff size (unused)
  PutU64(ds64, 4);  // data size: two 16-bit samples
  PutU64(ds64, 2);  // sample count
  PutU32(ds64, 0);  // table length
  const Bytes file = Riff({Chunk("ds64", ds64), Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16)),
                           Chunk("data", Pcm16({1, 2}), 0xFFFFFFFF), Chunk("LIST", {1, 2})},
                          "RF64");
  EXPECT_EQ(ParseOk(file).samples, (std::vector<float>{1 / 32768.0f, 2 / 32768.0f}));
}

// ---- Errors ---------------------------------------------------------------------------------

TEST(WavReaderTest, NotAWavFile) {
  ExpectInvalid({}, "is not a WAV file");
  ExpectInvalid({'R', 'I', 'F', 'F'}, "is not a WAV file");
  Bytes avi = SimpleWav16({1}, 1, 16000);
  std::memcpy(avi.data() + 8, "AVI ", 4);
  ExpectInvalid(avi, "is not a WAV file");
  Bytes rifx = SimpleWav16({1}, 1, 16000);
  std::memcpy(rifx.data(), "RIFX", 4);  // big-endian RIFF
  ExpectInvalid(rifx, "is not a WAV file");
  const std::string text = "ID3\x03 this is an mp3, honest";
  ExpectInvalid(Bytes(text.begin(), text.end()), "is not a WAV file");
}

TEST(WavReaderTest, MissingChunks) {
  ExpectInvalid(Riff({Chunk("data", Pcm16({1, 2}))}), "has no fmt chunk");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16))}), "has no data chunk");
  ExpectInvalid(Riff({}), "has no fmt chunk");
}

TEST(WavReaderTest, UnsupportedEncodingsAreNamed) {
  const Bytes data = Chunk("data", Bytes(64, 0));
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(0x0055, 2, 44100, 0, 1)), data}),
                "uses encoding 0x0055 (MPEG), which waav cannot read; supported: PCM "
                "8/16/24/32-bit, float 32/64-bit");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(0x0006, 1, 8000, 8)), data}), "0x0006 (A-law)");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(0x0011, 1, 8000, 4, 256)), data}),
                "0x0011 (IMA ADPCM)");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(0x1234, 1, 8000, 16)), data}), "0x1234 (unknown)");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 12, 2)), data}),
                "uses 12-bit PCM, which waav cannot read");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagFloat, 1, 16000, 16)), data}), "uses 16-bit float");
  ExpectInvalid(Riff({Chunk("fmt ", ExtensibleFmtBody(0x0055, 1, 16000, 16, 16)), data}),
                "0x0055 (MPEG)");
  ExpectInvalid(Riff({Chunk("fmt ", ExtensibleFmtBody(kTagPcm, 1, 16000, 16, 16, true)), data}),
                "unknown WAVE_FORMAT_EXTENSIBLE sub-format GUID");
}

TEST(WavReaderTest, BadFmtFields) {
  const Bytes data = Chunk("data", Bytes(64, 0));
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 0, 16000, 16, 2)), data}), "has 0 channels");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 5000, 16000, 16)), data}),
                "has 5000 channels");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 0, 16)), data}),
                "has a sample rate of 0 Hz");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 2'000'000'000, 16)), data}),
                "has a sample rate of 2000000000 Hz");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagPcm, 2, 16000, 16, 3)), data}),
                "has block align 3, expected 4");
  Bytes short_fmt = FmtBody(kTagPcm, 1, 16000, 16);
  short_fmt.resize(14);
  ExpectInvalid(Riff({Chunk("fmt ", short_fmt), data}), "truncated fmt chunk (14 bytes");
  Bytes short_extensible = ExtensibleFmtBody(kTagPcm, 1, 16000, 16, 16);
  short_extensible.resize(24);
  ExpectInvalid(Riff({Chunk("fmt ", short_extensible), data}),
                "WAVE_FORMAT_EXTENSIBLE fmt chunk of 24 bytes, need 40");
  ExpectInvalid(Riff({Chunk("fmt ", ExtensibleFmtBody(kTagPcm, 1, 16000, 16, 24)), data}),
                "declares 24 valid bits in a 16-bit sample container");
}

TEST(WavReaderTest, TruncatedFmtChunk) {
  Bytes file = Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 16000, 16))});
  file.resize(file.size() - 6);
  ExpectInvalid(file, "has a truncated fmt chunk (10 of 16 bytes present)");
}

TEST(WavReaderTest, NoCompleteFrameIsNoAudio) {
  const Bytes fmt = Chunk("fmt ", FmtBody(kTagPcm, 2, 16000, 16));
  ExpectInvalid(Riff({fmt, Chunk("data", {})}), "contains no audio");
  ExpectInvalid(Riff({fmt, Chunk("data", {1, 2, 3})}), "contains no audio");
  Bytes header_only = Riff({fmt});
  Append(header_only, {'d', 'a', 't', 'a', 0, 0, 0, 0});
  ExpectInvalid(header_only, "contains no audio");
}

TEST(WavReaderTest, NonFiniteFloatIsRejected) {
  ExpectInvalid(wav_test::SimpleWavFloat({0.5f, std::numeric_limits<float>::quiet_NaN()}, 1, 16000),
                "non-finite sample (NaN or infinity) at sample frame 1");
  ExpectInvalid(Riff({Chunk("fmt ", FmtBody(kTagFloat, 2, 16000, 64)),
                      Chunk("data", Float64({1e308, 1e308}))}),  // the mixdown overflows float
                "non-finite sample");
}

// ---- Files ----------------------------------------------------------------------------------

std::string TempPath(const std::string& leaf) {
  return (std::filesystem::path(::testing::TempDir()) / leaf).string();
}

TEST(WavReaderTest, ReadsFile) {
  const std::string path = TempPath("waav_wav_reader_test.wav");
  const Bytes file = SimpleWav16({100, -100, 200}, 1, 22050);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
  }
  absl::StatusOr<Audio> audio = ReadWavFile(path);
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_EQ(audio->sample_rate_hz, 22050);
  EXPECT_EQ(audio->samples.size(), 3u);
  std::filesystem::remove(path);
}

TEST(WavReaderTest, MissingFileAndDirectoryAreNotFound) {
  const std::string missing = TempPath("waav_no_such_file.wav");
  absl::StatusOr<Audio> audio = ReadWavFile(missing);
  EXPECT_EQ(audio.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StartsWith(audio.status().message(), missing)) << audio.status();

  audio = ReadWavFile(::testing::TempDir());
  EXPECT_EQ(audio.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(audio.status().message(), "is a directory")) << audio.status();
}

TEST(WavReaderTest, OversizedFileIsRefusedBeforeReading) {
  // A sparse file: it claims the size without using the disk space, and the reader must refuse
  // it from its size alone.
  const std::string path = TempPath("waav_huge.wav");
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kMaxWavFileBytes + 1), 0);
  ::close(fd);
  absl::StatusOr<Audio> audio = ReadWavFile(path);
  EXPECT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(audio.status().message(), path)) << audio.status();
  EXPECT_TRUE(absl::StrContains(audio.status().message(), "larger than the limit"))
      << audio.status();
  std::filesystem::remove(path);
}

TEST(WavReaderTest, EmptyFile) {
  const std::string path = TempPath("waav_empty.wav");
  { std::ofstream out(path, std::ios::binary); }
  absl::StatusOr<Audio> audio = ReadWavFile(path);
  EXPECT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(audio.status().message(), "is not a WAV file")) << audio.status();
  std::filesystem::remove(path);
}

// ---- Robustness -----------------------------------------------------------------------------

// Random truncations and byte flips of valid files must give either audio or InvalidArgument,
// never a crash or an out-of-bounds read (run under the `debug` preset's AddressSanitizer).
TEST(WavReaderTest, CorruptedFilesNeverCrash) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);

  std::vector<int32_t> pcm(300);
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = static_cast<int32_t>(i * 9973) - 1'000'000;
  const Bytes odd_list = {'I', 'N', 'F', 'O', 'x'};
  const std::vector<Bytes> seeds = {
      SimpleWav16(std::vector<int16_t>(200, 7), 2, 44100),
      Riff({Chunk("LIST", odd_list), Chunk("fmt ", ExtensibleFmtBody(kTagPcm, 2, 48000, 24, 20)),
            Chunk("data", Pcm24(pcm)), Chunk("LIST", odd_list)}),
      Riff({Chunk("fmt ", ExtensibleFmtBody(kTagFloat, 1, 16000, 32, 32)),
            Chunk("fact", {1, 0, 0, 0}), Chunk("data", Float32(std::vector<float>(100, 0.25f)))}),
      Riff({Chunk("fmt ", FmtBody(kTagFloat, 3, 8000, 64)),
            Chunk("data", Float64(std::vector<double>(90, -0.5)))}),
      Riff({Chunk("fmt ", FmtBody(kTagPcm, 1, 8000, 8)), Chunk("data", Bytes(101, 200))}),
  };

  int parsed = 0;
  constexpr int kIterations = 20000;
  for (int i = 0; i < kIterations; ++i) {
    Bytes file = seeds[rng() % seeds.size()];
    const int flips = static_cast<int>(rng() % 9);
    for (int f = 0; f < flips; ++f) {
      // Most flips land in the headers, where they matter.
      const size_t span = (rng() % 4 != 0) ? std::min<size_t>(file.size(), 96) : file.size();
      file[rng() % span] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    if (rng() % 2 == 0) file.resize(rng() % (file.size() + 1));
    // An exactly sized heap copy, so that AddressSanitizer sees any read past the end.
    std::vector<uint8_t> exact(file.begin(), file.end());
    absl::StatusOr<Audio> audio = ParseWav(exact, kName);
    if (audio.ok()) {
      ++parsed;
      ASSERT_FALSE(audio->samples.empty());
      ASSERT_GT(audio->sample_rate_hz, 0);
      for (float s : audio->samples) ASSERT_TRUE(std::isfinite(s));
    } else {
      ASSERT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument) << audio.status();
      ASSERT_TRUE(absl::StartsWith(audio.status().message(), kName)) << audio.status();
    }
  }
  // Both outcomes must occur, or the mutations are too weak or too strong to test anything.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, kIterations);
}

}  // namespace
}  // namespace waav::audio
