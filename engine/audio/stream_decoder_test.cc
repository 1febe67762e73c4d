// StreamDecoder: configuration checks, the raw encodings, and behaviour common to all decoders
// (limits, errors that stick, Finish()). FLAC and Ogg Opus have their own test files.
#include "engine/audio/stream_decoder.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/codec_test_util.h"
#include "engine/audio/g711.h"
#include "engine/audio/resampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace waav::audio {
namespace {

using codec_test::Bytes;
using ::testing::HasSubstr;

struct BadFormat {
  AudioFormatSpec format;
  std::string message;
};

TEST(StreamDecoderTest, RejectsBadFormats) {
  const std::vector<BadFormat> cases = {
      {{AudioEncoding::kUnspecified, 16000, 1}, "not set"},
      {{static_cast<AudioEncoding>(99), 16000, 1}, "unknown audio encoding UNKNOWN(99)"},
      {{AudioEncoding::kLinear16, 0, 1}, "sample_rate_hz is required for LINEAR16"},
      {{AudioEncoding::kMulaw, 7999, 1}, "sample_rate_hz 7999 is outside 8000..192000"},
      {{AudioEncoding::kFloat32, 192001, 1}, "sample_rate_hz 192001 is outside"},
      {{AudioEncoding::kAlaw, -8000, 1}, "sample_rate_hz -8000"},
      {{AudioEncoding::kLinear16, 16000, 9}, "channels 9 is outside 1..8 (0 means 1)"},
      {{AudioEncoding::kLinear16, 16000, -1}, "channels -1"},
      {{AudioEncoding::kFlac, 4000, 0}, "sample_rate_hz 4000 is outside 8000..192000 Hz (or 0"},
      {{AudioEncoding::kOggOpus, 0, 9}, "channels 9 is outside 1..8 (or 0"},
  };
  for (const BadFormat& c : cases) {
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d = StreamDecoder::Create(c.format);
    ASSERT_FALSE(d.ok()) << c.message;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(c.message));
  }
}

TEST(StreamDecoderTest, RejectsBadOptions) {
  const AudioFormatSpec format{AudioEncoding::kLinear16, 16000, 1};
  StreamDecoderOptions options;
  options.output_sample_rate_hz = 100;
  EXPECT_THAT(std::string(StreamDecoder::Create(format, options).status().message()),
              HasSubstr("output_sample_rate_hz 100"));
  options = {};
  options.max_buffered_bytes = 10;
  EXPECT_THAT(std::string(StreamDecoder::Create(format, options).status().message()),
              HasSubstr("max_buffered_bytes 10"));
  options = {};
  options.max_feed_seconds = 0;
  EXPECT_THAT(std::string(StreamDecoder::Create(format, options).status().message()),
              HasSubstr("max_feed_seconds"));
  options.max_feed_seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(StreamDecoder::Create(format, options).ok());
}

TEST(StreamDecoderTest, AcceptsEveryRateInRangeAndZeroChannels) {
  for (int rate : {8000, 11025, 12345, 22050, 96000, 192000}) {
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create({AudioEncoding::kLinear16, rate, 0});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ((*d)->input_sample_rate_hz(), rate);
    EXPECT_EQ((*d)->input_channels(), 1);
    EXPECT_EQ((*d)->output_sample_rate_hz(), kWhisperSampleRateHz);
  }
}

// A random raw stream and the mono signal it must decode to, computed independently of the
// decoder: integer samples summed and divided by channels x 32768, floats averaged in double.
struct RawCase {
  Bytes bytes;
  std::vector<float> mono;
};

RawCase MakeRaw(AudioEncoding encoding, int channels, size_t frames, std::mt19937& rng) {
  RawCase c;
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> gauss(0.0f, 0.3f);
  for (size_t f = 0; f < frames; ++f) {
    int64_t int_sum = 0;
    double float_sum = 0;
    for (int ch = 0; ch < channels; ++ch) {
      switch (encoding) {
        case AudioEncoding::kLinear16: {
          const int16_t s = static_cast<int16_t>(rng());
          c.bytes.push_back(static_cast<uint8_t>(s & 0xFF));
          c.bytes.push_back(static_cast<uint8_t>((s >> 8) & 0xFF));
          int_sum += s;
          break;
        }
        case AudioEncoding::kFloat32: {
          const float v = gauss(rng);  // unclipped: values beyond +-1 pass through
          const uint32_t bits = std::bit_cast<uint32_t>(v);
          for (int i = 0; i < 4; ++i) c.bytes.push_back(static_cast<uint8_t>(bits >> (8 * i)));
          float_sum += v;
          break;
        }
        case AudioEncoding::kMulaw:
        case AudioEncoding::kAlaw: {
          const uint8_t code = static_cast<uint8_t>(byte(rng));
          c.bytes.push_back(code);
          int_sum +=
              encoding == AudioEncoding::kMulaw ? MulawToLinear16(code) : AlawToLinear16(code);
          break;
        }
        default:
          break;
      }
    }
    c.mono.push_back(encoding == AudioEncoding::kFloat32
                         ? static_cast<float>(float_sum / channels)
                         : static_cast<float>(static_cast<double>(int_sum) / (32768.0 * channels)));
  }
  return c;
}

TEST(StreamDecoderTest, RawEncodingsDecodeExactlyAndResampleLikeTheOneShotResampler) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (AudioEncoding encoding : {AudioEncoding::kLinear16, AudioEncoding::kFloat32,
                                 AudioEncoding::kMulaw, AudioEncoding::kAlaw}) {
    for (int channels : {1, 2, 5, 8}) {
      for (int rate : {8000, 16000, 44100}) {
        SCOPED_TRACE(absl::StrCat(AudioEncodingName(encoding), " ", channels, " ch ", rate, " Hz"));
        const size_t frames = rate / 2 + rng() % 1000;
        const RawCase c = MakeRaw(encoding, channels, frames, rng);
        const AudioFormatSpec format{encoding, rate, channels};

        absl::StatusOr<std::vector<float>> native =
            codec_test::DecodeAll(format, codec_test::NativeRate(), c.bytes, rng);
        ASSERT_TRUE(native.ok()) << native.status();
        ASSERT_EQ(native->size(), c.mono.size());
        for (size_t i = 0; i < c.mono.size(); ++i) {
          ASSERT_EQ((*native)[i], c.mono[i]) << "sample " << i;
        }

        absl::StatusOr<std::unique_ptr<StreamDecoder>> d = StreamDecoder::Create(format);
        ASSERT_TRUE(d.ok()) << d.status();
        std::vector<float> out_16k;
        ASSERT_TRUE(codec_test::FeedInRandomPieces(**d, c.bytes, rng, &out_16k).ok());
        EXPECT_EQ((*d)->input_samples_decoded(), static_cast<int64_t>(frames));
        EXPECT_EQ((*d)->bytes_fed(), static_cast<int64_t>(c.bytes.size()));
        EXPECT_EQ((*d)->trailing_bytes_dropped(), 0);
        absl::StatusOr<std::vector<float>> expected = Resample(c.mono, rate, kWhisperSampleRateHz);
        ASSERT_TRUE(expected.ok());
        // The streaming and one-shot resamplers run the same soxr recipe (resampler.h): they
        // agree to float rounding, far below the 16-bit quantisation step of 3e-5.
        ASSERT_EQ(out_16k.size(), expected->size());
        EXPECT_LT(codec_test::MaxAbsDiff(out_16k, *expected), 1e-5);
      }
    }
  }
}

TEST(StreamDecoderTest, OutputRateZeroKeepsTheInputRateAndOtherRatesResample) {
  std::mt19937 rng(codec_test::FreshSeed());
  const RawCase c = MakeRaw(AudioEncoding::kLinear16, 1, 16000, rng);
  StreamDecoderOptions options;
  options.output_sample_rate_hz = 8000;
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
      StreamDecoder::Create({AudioEncoding::kLinear16, 16000, 1}, options);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->output_sample_rate_hz(), 8000);
  std::vector<float> out;
  ASSERT_TRUE((*d)->Feed(c.bytes, &out).ok());
  ASSERT_TRUE((*d)->Finish(&out).ok());
  EXPECT_NEAR(static_cast<double>(out.size()), 8000, 1);

  d = StreamDecoder::Create({AudioEncoding::kLinear16, 22050, 1}, codec_test::NativeRate());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->output_sample_rate_hz(), 22050);
}

TEST(StreamDecoderTest, PartialFrameAtTheEndIsDroppedAndCounted) {
  std::mt19937 rng(codec_test::FreshSeed());
  RawCase c = MakeRaw(AudioEncoding::kLinear16, 2, 10, rng);
  c.bytes.insert(c.bytes.end(), {1, 2, 3});  // 3 bytes of an 11th 4-byte frame
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
      StreamDecoder::Create({AudioEncoding::kLinear16, 16000, 2}, codec_test::NativeRate());
  ASSERT_TRUE(d.ok());
  std::vector<float> out;
  ASSERT_TRUE(codec_test::FeedInRandomPieces(**d, c.bytes, rng, &out, 7).ok());
  EXPECT_EQ(out, c.mono);
  EXPECT_EQ((*d)->trailing_bytes_dropped(), 3);
  EXPECT_EQ((*d)->input_samples_decoded(), 10);
}

TEST(StreamDecoderTest, EmptyStreamIsNotAnError) {
  for (AudioEncoding e :
       {AudioEncoding::kLinear16, AudioEncoding::kFlac, AudioEncoding::kOggOpus}) {
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create({e, IsRawEncoding(e) ? 16000 : 0, 0});
    ASSERT_TRUE(d.ok());
    std::vector<float> out;
    EXPECT_TRUE((*d)->Feed({}, &out).ok());
    EXPECT_TRUE((*d)->Finish(&out).ok());
    EXPECT_TRUE(out.empty());
  }
}

TEST(StreamDecoderTest, NonFiniteFloat32IsRejectedAndTheErrorSticks) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const struct {
    float value;
    const char* name;
  } bad[] = {{std::numeric_limits<float>::quiet_NaN(), "NaN"},
             {std::numeric_limits<float>::infinity(), "+infinity"},
             {-std::numeric_limits<float>::infinity(), "-infinity"}};
  for (const auto& b : bad) {
    RawCase c = MakeRaw(AudioEncoding::kFloat32, 2, 1000, rng);
    const size_t frame = rng() % 1000;
    const int channel = static_cast<int>(rng() % 2);
    const size_t offset = frame * 8 + static_cast<size_t>(channel) * 4;
    const uint32_t bits = std::bit_cast<uint32_t>(b.value);
    for (int i = 0; i < 4; ++i) c.bytes[offset + i] = static_cast<uint8_t>(bits >> (8 * i));
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create({AudioEncoding::kFloat32, 16000, 2});
    ASSERT_TRUE(d.ok());
    std::vector<float> out;
    const absl::Status s = codec_test::FeedInRandomPieces(**d, c.bytes, rng, &out, 100, false);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("FLOAT32: sample ", frame, " of channel ", channel,
                                       " (byte offset ", offset, ") is ", b.name)));
    EXPECT_EQ((*d)->Feed(c.bytes, &out), s);
    EXPECT_EQ((*d)->Finish(&out), s);
  }
}

TEST(StreamDecoderTest, FeedAfterFinishAndFinishTwiceAreFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
      StreamDecoder::Create({AudioEncoding::kMulaw, 8000, 1});
  ASSERT_TRUE(d.ok());
  std::vector<float> out;
  const Bytes bytes(800, 0xFF);
  ASSERT_TRUE((*d)->Feed(bytes, &out).ok());
  ASSERT_TRUE((*d)->Finish(&out).ok());
  EXPECT_NEAR(static_cast<double>(out.size()), 1600, 1);
  EXPECT_EQ((*d)->Feed(bytes, &out).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*d)->Finish(&out).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StreamDecoderTest, OnePieceMayDecodeAtMostMaxFeedSeconds) {
  StreamDecoderOptions options;
  options.max_feed_seconds = 0.5;
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
      StreamDecoder::Create({AudioEncoding::kAlaw, 8000, 1}, options);
  ASSERT_TRUE(d.ok());
  std::vector<float> out;
  const Bytes quarter_second(2000, 0xD5);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE((*d)->Feed(quarter_second, &out).ok());
  const Bytes second(8000, 0xD5);
  const absl::Status s = (*d)->Feed(second, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ALAW: 8000 bytes of audio decode to more than 0.5 s"));
}

}  // namespace
}  // namespace waav::audio
