// ClientAudio: encodings, chunking and pacing of what the CLI and waav-load send; the G.711
// encoders; the errors for bad files and options.
#include "tools/waav/client_audio.h"

#include <FLAC/stream_encoder.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/audio/g711.h"
#include "engine/audio/stream_decoder.h"
#include "engine/audio/wav_test_util.h"
#include "gtest/gtest.h"

namespace waav::cli {
namespace {

using audio::wav_test::Bytes;
using audio::wav_test::SimpleWav16;
using audio::wav_test::SimpleWavFloat;

uint32_t FreshSeed() { return std::random_device{}(); }

std::vector<int16_t> RandomPcm(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-32768, 32767);
  std::vector<int16_t> v(n);
  for (int16_t& s : v) s = static_cast<int16_t>(d(rng));
  return v;
}

FLAC__StreamEncoderWriteStatus AppendBytes(const FLAC__StreamEncoder*, const FLAC__byte buf[],
                                           size_t bytes, uint32_t, uint32_t, void* client) {
  auto* out = static_cast<Bytes*>(client);
  out->insert(out->end(), buf, buf + bytes);
  return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
}

// A mono 16-bit FLAC stream of `samples` at `rate_hz`.
Bytes EncodeFlac(const std::vector<int16_t>& samples, int rate_hz) {
  Bytes out;
  FLAC__StreamEncoder* enc = FLAC__stream_encoder_new();
  FLAC__stream_encoder_set_channels(enc, 1);
  FLAC__stream_encoder_set_bits_per_sample(enc, 16);
  FLAC__stream_encoder_set_sample_rate(enc, static_cast<uint32_t>(rate_hz));
  FLAC__stream_encoder_set_blocksize(enc, 1024);
  EXPECT_EQ(FLAC__stream_encoder_init_stream(enc, &AppendBytes, nullptr, nullptr, nullptr, &out),
            FLAC__STREAM_ENCODER_INIT_STATUS_OK);
  std::vector<FLAC__int32> wide(samples.begin(), samples.end());
  EXPECT_TRUE(FLAC__stream_encoder_process_interleaved(enc, wide.data(),
                                                       static_cast<uint32_t>(wide.size())));
  EXPECT_TRUE(FLAC__stream_encoder_finish(enc));
  FLAC__stream_encoder_delete(enc);
  return out;
}

ClientAudioOptions Options(EncodingChoice encoding = EncodingChoice::kAuto, int chunk_ms = 100) {
  ClientAudioOptions o;
  o.encoding = encoding;
  o.chunk_ms = chunk_ms;
  return o;
}

// The invariants every ClientAudio keeps: chunks cover the bytes in order, each non-empty, end
// times never decrease and the last is the duration.
void ExpectWellFormed(const ClientAudio& a) {
  ASSERT_FALSE(a.chunks.empty());
  size_t expected_begin = 0;
  int64_t last_end_us = 0;
  for (const AudioChunk& c : a.chunks) {
    EXPECT_EQ(c.begin, expected_begin);
    EXPECT_GT(c.end, c.begin);
    EXPECT_GE(c.end_us, last_end_us);
    expected_begin = c.end;
    last_end_us = c.end_us;
  }
  EXPECT_EQ(expected_begin, a.bytes.size());
  EXPECT_EQ(a.chunks.back().end_us, a.duration_us);
}

TEST(EncodingChoiceTest, ParsesNamesAndAliasesCaseInsensitively) {
  EXPECT_EQ(*ParseEncodingChoice("auto"), EncodingChoice::kAuto);
  EXPECT_EQ(*ParseEncodingChoice("LINEAR16"), EncodingChoice::kLinear16);
  EXPECT_EQ(*ParseEncodingChoice("AUDIO_ENCODING_LINEAR16"), EncodingChoice::kLinear16);
  EXPECT_EQ(*ParseEncodingChoice("float32"), EncodingChoice::kFloat32);
  EXPECT_EQ(*ParseEncodingChoice("MuLaw"), EncodingChoice::kMulaw);
  EXPECT_EQ(*ParseEncodingChoice("alaw"), EncodingChoice::kAlaw);
  EXPECT_EQ(*ParseEncodingChoice("flac"), EncodingChoice::kFlac);
  EXPECT_EQ(*ParseEncodingChoice("OGG_OPUS"), EncodingChoice::kOggOpus);
  for (const char* bad : {"", "mp3", "linear", "auto "}) {
    absl::StatusOr<EncodingChoice> parsed = ParseEncodingChoice(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("linear16, float32"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(Pcm16Test, InvertsTheWavReaderAndClips) {
  for (int v = -32768; v <= 32767; ++v) {
    ASSERT_EQ(FloatToPcm16(static_cast<float>(v) / 32768.0f), v);
  }
  EXPECT_EQ(FloatToPcm16(1.0f), 32767);
  EXPECT_EQ(FloatToPcm16(7.5f), 32767);
  EXPECT_EQ(FloatToPcm16(-1.0f), -32768);
  EXPECT_EQ(FloatToPcm16(-3.0f), -32768);
}

TEST(G711EncodeTest, EveryCodeValueRoundTripsAndRandomSamplesGetTheNearestCode) {
  for (int code = 0; code < 256; ++code) {
    const int16_t mu = audio::g711_internal::MulawExpand(static_cast<uint8_t>(code));
    EXPECT_EQ(audio::g711_internal::MulawExpand(MulawEncode(mu)), mu) << code;
    const int16_t a = audio::g711_internal::AlawExpand(static_cast<uint8_t>(code));
    EXPECT_EQ(audio::g711_internal::AlawExpand(AlawEncode(a)), a) << code;
  }
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int16_t s : RandomPcm(2000, rng)) {
    int best_mu = 1 << 20;
    int best_a = 1 << 20;
    for (int code = 0; code < 256; ++code) {
      best_mu = std::min(
          best_mu, std::abs(audio::g711_internal::MulawExpand(static_cast<uint8_t>(code)) - s));
      best_a = std::min(best_a,
                        std::abs(audio::g711_internal::AlawExpand(static_cast<uint8_t>(code)) - s));
    }
    EXPECT_EQ(std::abs(audio::g711_internal::MulawExpand(MulawEncode(s)) - s), best_mu) << s;
    EXPECT_EQ(std::abs(audio::g711_internal::AlawExpand(AlawEncode(s)) - s), best_a) << s;
  }
}

TEST(ClientAudioTest, WavBecomesLinear16ChunksOfChunkMs) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const std::vector<int16_t> pcm = RandomPcm(16000 + 800 + 7, rng);  // 1.050437 s
  const Bytes wav = SimpleWav16(pcm, 1, 16000);
  absl::StatusOr<ClientAudio> a = MakeClientAudio(wav, "x.wav", Options());
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectWellFormed(*a);
  EXPECT_EQ(a->format.encoding(), v1::AUDIO_ENCODING_LINEAR16);
  EXPECT_EQ(a->format.sample_rate_hz(), 16000u);
  EXPECT_EQ(a->format.channels(), 1u);
  EXPECT_EQ(a->time_base_hz, 16000);
  ASSERT_EQ(a->bytes.size(), pcm.size() * 2);
  // The bytes are the file's samples, little-endian.
  EXPECT_EQ(
      std::memcmp(a->bytes.data(), wav.data() + (wav.size() - pcm.size() * 2), a->bytes.size()), 0);
  ASSERT_EQ(a->chunks.size(), 11u);  // ten of 100 ms, one of 50.4375 ms
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(a->chunks[i].end - a->chunks[i].begin, 3200u);
    EXPECT_EQ(a->chunks[i].end_us, static_cast<int64_t>(i + 1) * 100'000);
  }
  EXPECT_EQ(a->duration_us, 1'050'437);
}

TEST(ClientAudioTest, StereoIsMixedDownAndOtherRawEncodingsHaveTheirSampleSizes) {
  // A stereo float file at 11025 Hz, 0.5 s; sent mono.
  std::vector<float> stereo(11025);
  for (size_t i = 0; i < stereo.size(); ++i) stereo[i] = std::sin(0.01f * static_cast<float>(i));
  const Bytes wav = SimpleWavFloat(stereo, 2, 11025);
  const struct {
    EncodingChoice choice;
    v1::AudioEncoding encoding;
    size_t bytes_per_sample;
  } cases[] = {{EncodingChoice::kLinear16, v1::AUDIO_ENCODING_LINEAR16, 2},
               {EncodingChoice::kFloat32, v1::AUDIO_ENCODING_FLOAT32, 4},
               {EncodingChoice::kMulaw, v1::AUDIO_ENCODING_MULAW, 1},
               {EncodingChoice::kAlaw, v1::AUDIO_ENCODING_ALAW, 1}};
  for (const auto& c : cases) {
    absl::StatusOr<ClientAudio> a = MakeClientAudio(wav, "s.wav", Options(c.choice, 20));
    ASSERT_TRUE(a.ok()) << a.status();
    ExpectWellFormed(*a);
    EXPECT_EQ(a->format.encoding(), c.encoding);
    EXPECT_EQ(a->format.sample_rate_hz(), 11025u);
    EXPECT_EQ(a->bytes.size(), 5512u * c.bytes_per_sample);
    EXPECT_EQ(a->chunks.size(), (5512u + 219u) / 220u);  // 20 ms at 11025 Hz: 220 frames
  }
  // FLOAT32 carries the mixed-down samples exactly.
  absl::StatusOr<ClientAudio> f = MakeClientAudio(wav, "s.wav", Options(EncodingChoice::kFloat32));
  ASSERT_TRUE(f.ok());
  float second;
  std::memcpy(&second, f->bytes.data() + 4, 4);
  EXPECT_FLOAT_EQ(second, 0.5f * (stereo[2] + stereo[3]));
}

TEST(ClientAudioTest, TailSilenceExtendsWavInput) {
  const Bytes wav = SimpleWav16(std::vector<int16_t>(8000, 1000), 1, 8000);
  ClientAudioOptions o = Options();
  o.tail_silence_ms = 500;
  absl::StatusOr<ClientAudio> a = MakeClientAudio(wav, "t.wav", o);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectWellFormed(*a);
  EXPECT_EQ(a->duration_us, 1'500'000);
  EXPECT_EQ(a->bytes.size(), 12000u * 2);
  EXPECT_EQ(a->bytes[a->bytes.size() - 1], 0);
}

TEST(ClientAudioTest, FlacIsSentAsItIsAndPacedByItsDecodedAudio) {
  const uint32_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::vector<int16_t> pcm(24000 * 3 / 2);  // 1.5 s at 24 kHz, a quiet noisy sine
  std::normal_distribution<double> noise(0, 300);
  for (size_t i = 0; i < pcm.size(); ++i) {
    pcm[i] = static_cast<int16_t>(8000 * std::sin(0.05 * static_cast<double>(i)) + noise(rng));
  }
  const Bytes flac = EncodeFlac(pcm, 24000);
  absl::StatusOr<ClientAudio> a = MakeClientAudio(flac, "x.flac", Options());
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectWellFormed(*a);
  EXPECT_EQ(a->format.encoding(), v1::AUDIO_ENCODING_FLAC);
  EXPECT_EQ(a->format.sample_rate_hz(), 0u);  // the header says
  EXPECT_EQ(a->time_base_hz, 24000);
  EXPECT_EQ(a->duration_us, 1'500'000);
  ASSERT_EQ(a->bytes.size(), flac.size());
  EXPECT_EQ(std::memcmp(a->bytes.data(), flac.data(), flac.size()), 0);
  // 1024-sample frames of 42.7 ms: chunks close at the first frame past each 100 ms, so every
  // chunk but the last holds 100..143 ms of audio and ends within a frame of a multiple of 100.
  ASSERT_GE(a->chunks.size(), 10u);
  for (size_t i = 0; i + 1 < a->chunks.size(); ++i) {
    const int64_t end_us = a->chunks[i].end_us;
    EXPECT_LT(end_us % 100'000, 42'667 + 1) << i;
  }
  // Explicitly asking for FLAC works too; asking for LINEAR16 does not.
  EXPECT_TRUE(MakeClientAudio(flac, "x.flac", Options(EncodingChoice::kFlac)).ok());
  absl::StatusOr<ClientAudio> wrong =
      MakeClientAudio(flac, "x.flac", Options(EncodingChoice::kLinear16));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("x.flac"), std::string::npos);
}

TEST(ClientAudioTest, BadFilesAndOptionsAreClearErrors) {
  const Bytes wav = SimpleWav16(std::vector<int16_t>(1600, 0), 1, 16000);
  struct Case {
    Bytes bytes;
    ClientAudioOptions options;
    std::string expect;  // in the message
  };
  ClientAudioOptions tail = Options();
  tail.tail_silence_ms = 100;
  const std::vector<int16_t> tone(4800, 100);
  const Bytes flac = EncodeFlac(tone, 16000);
  Bytes truncated_flac(flac.begin(), flac.begin() + 20);
  Bytes corrupt_flac = flac;
  for (size_t i = 60; i < corrupt_flac.size(); i += 7) corrupt_flac[i] ^= 0x5A;
  const Case cases[] = {
      {{}, Options(), "is empty"},
      {{'I', 'D', '3', 4, 0, 0}, Options(), "not a WAV"},
      {Bytes(wav.begin(), wav.begin() + 30), Options(), "bad.wav"},  // truncated header
      {Bytes(wav.begin(), wav.begin() + 44), Options(), "bad.wav"},  // no audio
      {SimpleWav16(std::vector<int16_t>(100, 0), 1, 4000), Options(), "4000 Hz"},
      {wav, Options(EncodingChoice::kFlac), "not re-encoded"},
      {wav, Options(EncodingChoice::kAuto, 5), "chunk length 5 ms"},
      {wav, Options(EncodingChoice::kAuto, 6000), "chunk length 6000 ms"},
      {flac, tail, "tail silence"},
      {truncated_flac, Options(), "bad.wav"},
      {corrupt_flac, Options(), "bad.wav"},
      {{'O', 'g', 'g', 'S', 0, 2, 0, 0}, Options(), "bad.wav"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    absl::StatusOr<ClientAudio> a = MakeClientAudio(cases[i].bytes, "bad.wav", cases[i].options);
    ASSERT_FALSE(a.ok()) << i;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_NE(a.status().message().find(cases[i].expect), std::string::npos)
        << i << ": " << a.status().message();
  }
}

TEST(ClientAudioTest, LoadsFilesAndNamesMissingOnes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("waav_client_audio_", FreshSeed());
  std::filesystem::create_directories(dir);
  const Bytes wav = SimpleWav16(std::vector<int16_t>(3200, 5), 1, 16000);
  const std::string path = (dir / "a.wav").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(wav.data()), static_cast<std::streamsize>(wav.size()));
  absl::StatusOr<ClientAudio> a = LoadClientAudio(path, Options());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name, path);
  EXPECT_EQ(a->duration_us, 200'000);

  absl::StatusOr<ClientAudio> missing = LoadClientAudio((dir / "none.wav").string(), Options());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.wav"), std::string::npos);
  absl::StatusOr<ClientAudio> directory = LoadClientAudio(dir.string(), Options());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(PacingTest, ChunksAreDueWhenTheirAudioEndsAtTheGivenSpeed) {
  const auto start = std::chrono::steady_clock::time_point(std::chrono::seconds(1000));
  using std::chrono::microseconds;
  EXPECT_EQ(ChunkDueTime(start, 100'000, 1.0), start + microseconds(100'000));
  EXPECT_EQ(ChunkDueTime(start, 100'000, 2.0), start + microseconds(50'000));
  EXPECT_EQ(ChunkDueTime(start, 100'000, 0.5), start + microseconds(200'000));
  EXPECT_EQ(ChunkDueTime(start, 1'000'001, 3.0), start + microseconds(333'334));  // rounded
  EXPECT_EQ(ChunkDueTime(start, 5'000'000, 0.0), start);                          // no pacing
  EXPECT_EQ(ChunkDueTime(start, 5'000'000, -1.0), start);
  // A whole file: due times rise by chunk_ms / speed and end at duration / speed.
  const Bytes wav = SimpleWav16(std::vector<int16_t>(16000 * 3, 0), 1, 16000);
  absl::StatusOr<ClientAudio> a = MakeClientAudio(wav, "p.wav", Options(EncodingChoice::kAuto, 40));
  ASSERT_TRUE(a.ok());
  for (size_t i = 1; i < a->chunks.size(); ++i) {
    EXPECT_EQ(ChunkDueTime(start, a->chunks[i].end_us, 1.25) -
                  ChunkDueTime(start, a->chunks[i - 1].end_us, 1.25),
              microseconds(32'000));
  }
  EXPECT_EQ(ChunkDueTime(start, a->chunks.back().end_us, 1.25), start + microseconds(2'400'000));
}

}  // namespace
}  // namespace waav::cli
