// The FLAC StreamDecoder against streams written by libFLAC's own encoder in the test.
#include <FLAC/metadata.h>
#include <FLAC/stream_encoder.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/codec_test_util.h"
#include "engine/audio/resampler.h"
#include "engine/audio/stream_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace waav::audio {
namespace {

using codec_test::Bytes;
using ::testing::HasSubstr;

struct FlacParams {
  int rate_hz = 16000;
  int channels = 1;
  int bits = 16;
  int blocksize = 0;           // 0: the encoder's default (4096 at these rates)
  int64_t padding_bytes = -1;  // >= 0: add VORBIS_COMMENT, APPLICATION and PADDING blocks
};

struct Encoded {
  Bytes bytes;
  std::vector<size_t> frame_offsets;  // where each frame starts in `bytes`
  std::vector<float> mono;            // what the decoder must return at the input rate
  size_t frames = 0;                  // samples per channel
};

FLAC__StreamEncoderWriteStatus WriteToEncoded(const FLAC__StreamEncoder*, const FLAC__byte buf[],
                                              size_t bytes, uint32_t samples, uint32_t,
                                              void* client) {
  auto* e = static_cast<Encoded*>(client);
  if (samples > 0) e->frame_offsets.push_back(e->bytes.size());
  e->bytes.insert(e->bytes.end(), buf, buf + bytes);
  return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
}

// A signal per channel: a sine of its own frequency plus noise, at half of full scale; or
// digital silence. The expected mono output sums the integer samples and scales once, as a
// lossless decoder must.
Encoded EncodeFlac(const FlacParams& p, size_t frames, std::mt19937& rng, bool silence = false) {
  Encoded e;
  e.frames = frames;
  const double full_scale = std::ldexp(1.0, p.bits - 1);
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<FLAC__int32> interleaved;
  for (size_t i = 0; i < frames; ++i) {
    int64_t sum = 0;
    for (int c = 0; c < p.channels; ++c) {
      const double x =
          silence ? 0
                  : 0.4 * std::sin(2 * std::numbers::pi * (220.0 * (c + 1)) * i / p.rate_hz) +
                        noise(rng);
      const auto s = static_cast<FLAC__int32>(std::clamp(std::lround(x * full_scale),
                                                         -static_cast<long>(full_scale),
                                                         static_cast<long>(full_scale) - 1));
      interleaved.push_back(s);
      sum += s;
    }
    e.mono.push_back(static_cast<float>(static_cast<double>(sum) / (full_scale * p.channels)));
  }

  FLAC__StreamEncoder* enc = FLAC__stream_encoder_new();
  FLAC__stream_encoder_set_streamable_subset(enc, false);  // any rate, 32 bits, big blocks
  FLAC__stream_encoder_set_channels(enc, p.channels);
  FLAC__stream_encoder_set_bits_per_sample(enc, p.bits);
  FLAC__stream_encoder_set_sample_rate(enc, p.rate_hz);
  FLAC__stream_encoder_set_compression_level(enc, 5);
  if (p.blocksize > 0) FLAC__stream_encoder_set_blocksize(enc, p.blocksize);
  std::vector<FLAC__StreamMetadata*> blocks;
  if (p.padding_bytes >= 0) {
    FLAC__StreamMetadata* comment = FLAC__metadata_object_new(FLAC__METADATA_TYPE_VORBIS_COMMENT);
    FLAC__StreamMetadata_VorbisComment_Entry entry;
    FLAC__metadata_object_vorbiscomment_entry_from_name_value_pair(&entry, "TITLE", "waav test");
    FLAC__metadata_object_vorbiscomment_append_comment(comment, entry, /*copy=*/false);
    FLAC__StreamMetadata* app = FLAC__metadata_object_new(FLAC__METADATA_TYPE_APPLICATION);
    std::memcpy(app->data.application.id, "waav", 4);
    std::vector<FLAC__byte> app_data(5000, 0xFF);  // looks like frame sync codes: must be skipped
    FLAC__metadata_object_application_set_data(app, app_data.data(),
                                               static_cast<uint32_t>(app_data.size()), true);
    FLAC__StreamMetadata* padding = FLAC__metadata_object_new(FLAC__METADATA_TYPE_PADDING);
    padding->length = static_cast<uint32_t>(p.padding_bytes);
    blocks = {comment, app, padding};
    FLAC__stream_encoder_set_metadata(enc, blocks.data(), static_cast<uint32_t>(blocks.size()));
  }
  EXPECT_EQ(FLAC__stream_encoder_init_stream(enc, &WriteToEncoded, nullptr, nullptr, nullptr, &e),
            FLAC__STREAM_ENCODER_INIT_STATUS_OK);
  EXPECT_TRUE(FLAC__stream_encoder_process_interleaved(enc, interleaved.data(),
                                                       static_cast<uint32_t>(frames)));
  EXPECT_TRUE(FLAC__stream_encoder_finish(enc));
  FLAC__stream_encoder_delete(enc);
  for (FLAC__StreamMetadata* b : blocks) FLAC__metadata_object_delete(b);
  return e;
}

absl::Status DecodeStatus(const AudioFormatSpec& format, const StreamDecoderOptions& options,
                          const Bytes& bytes, std::mt19937& rng) {
  return codec_test::DecodeAll(format, options, bytes, rng).status();
}

const AudioFormatSpec kFlac{AudioEncoding::kFlac, 0, 0};

TEST(FlacDecoderTest, DecodesLosslesslyInRandomPieces) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const FlacParams cases[] = {{16000, 1, 16, 0, -1},     {44100, 2, 24, 1152, 300'000},
                              {8000, 1, 8, 0, -1},       {48000, 8, 16, 512, 0},
                              {12345, 3, 20, 0, 10},     {22050, 2, 32, 0, -1},
                              {192000, 1, 16, 65535, -1}};
  for (const FlacParams& p : cases) {
    SCOPED_TRACE(absl::StrCat(p.rate_hz, " Hz ", p.channels, " ch ", p.bits, " bits"));
    const size_t frames = static_cast<size_t>(p.rate_hz) * 3 / 10 + rng() % 5000;
    const Encoded e = EncodeFlac(p, frames, rng);
    ASSERT_GT(e.frame_offsets.size(), 0u);

    // Declared values that agree with STREAMINFO are accepted as well as 0.
    const AudioFormatSpec declared{AudioEncoding::kFlac, p.rate_hz, p.channels};
    for (const AudioFormatSpec& format : {kFlac, declared}) {
      absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
          StreamDecoder::Create(format, codec_test::NativeRate());
      ASSERT_TRUE(d.ok()) << d.status();
      std::vector<float> out;
      const absl::Status s = codec_test::FeedInRandomPieces(**d, e.bytes, rng, &out);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ((*d)->input_sample_rate_hz(), p.rate_hz);
      EXPECT_EQ((*d)->input_channels(), p.channels);
      EXPECT_EQ((*d)->input_samples_decoded(), static_cast<int64_t>(frames));
      EXPECT_EQ((*d)->trailing_bytes_dropped(), 0);
      ASSERT_EQ(out.size(), e.mono.size());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], e.mono[i]) << "sample " << i;
    }

    absl::StatusOr<std::vector<float>> out_16k =
        codec_test::DecodeAll(kFlac, StreamDecoderOptions{}, e.bytes, rng);
    ASSERT_TRUE(out_16k.ok()) << out_16k.status();
    absl::StatusOr<std::vector<float>> expected = Resample(e.mono, p.rate_hz, 16000);
    ASSERT_TRUE(expected.ok());
    ASSERT_EQ(out_16k->size(), expected->size());
    EXPECT_LT(codec_test::MaxAbsDiff(*out_16k, *expected), 1e-5);  // see the raw decoder test
  }
}

TEST(FlacDecoderTest, StreamCutInsideAFrameKeepsTheCompleteFrames) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({16000, 2, 16, 1024, -1}, 16000, rng);
  ASSERT_GT(e.frame_offsets.size(), 10u);
  for (int trial = 0; trial < 5; ++trial) {
    const size_t frame = 1 + rng() % (e.frame_offsets.size() - 2);
    const size_t frame_bytes = e.frame_offsets[frame + 1] - e.frame_offsets[frame];
    const size_t cut = trial == 0 ? 0 : 1 + rng() % (frame_bytes - 1);  // 0: at the boundary
    const Bytes bytes(e.bytes.begin(),
                      e.bytes.begin() + static_cast<ptrdiff_t>(e.frame_offsets[frame] + cut));
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create(kFlac, codec_test::NativeRate());
    ASSERT_TRUE(d.ok());
    std::vector<float> out;
    const absl::Status s = codec_test::FeedInRandomPieces(**d, bytes, rng, &out);
    ASSERT_TRUE(s.ok()) << s << " cut " << cut << " of " << frame_bytes;
    EXPECT_EQ(out.size(), frame * 1024);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), e.mono.begin()));
    EXPECT_EQ((*d)->trailing_bytes_dropped(), static_cast<int64_t>(cut));
  }
}

Bytes Prefix(const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + n); }

TEST(FlacDecoderTest, RejectsBadHeaders) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({16000, 2, 16, 0, -1}, 8000, rng);
  const Bytes stream_info(e.bytes.begin() + 8, e.bytes.begin() + 42);
  auto with_blocks = [&](std::vector<Bytes> blocks) {
    Bytes b = {'f', 'L', 'a', 'C'};
    for (const Bytes& block : blocks) b.insert(b.end(), block.begin(), block.end());
    return b;
  };
  auto block = [](uint8_t type_and_last, const Bytes& body) {
    Bytes b(4 + body.size());
    b[0] = type_and_last;
    b[2] = static_cast<uint8_t>(body.size() >> 8);
    b[3] = static_cast<uint8_t>(body.size());
    std::copy(body.begin(), body.end(), b.begin() + 4);
    return b;
  };
  struct Case {
    std::string name;
    Bytes bytes;
    std::string message;
  };
  const Bytes wav = {'R', 'I', 'F', 'F', 0x24, 0, 0, 0, 'W', 'A', 'V', 'E'};
  const std::vector<Case> cases = {
      {"wav", wav, "does not start with the FLAC marker \"fLaC\" (it starts with \"R"},
      {"id3", {'I', 'D', '3', 4}, "does not start with the FLAC marker"},
      {"first block not STREAMINFO", with_blocks({block(0x04, Bytes(8)), block(0x80, stream_info)}),
       "the first metadata block (byte 4) has type 4, not STREAMINFO (0)"},
      {"invalid block type", with_blocks({block(0x00, stream_info), block(0x7F, Bytes(3))}),
       "metadata block at byte 42 has the invalid type 127"},
      {"short STREAMINFO", with_blocks({block(0x80, Bytes(20))}),
       "STREAMINFO at byte 4 is 20 bytes long, not 34"},
      {"two STREAMINFO", with_blocks({block(0x00, stream_info), block(0x80, stream_info)}),
       "a second STREAMINFO block at byte 42"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status s = DecodeStatus(kFlac, {}, c.bytes, rng);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(s.message()), HasSubstr("FLAC: "));
  }
}

TEST(FlacDecoderTest, RejectsRatesOutsideTheLimitsAndHeadersThatContradictTheDeclaredFormat) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  for (int rate : {7000, 384000}) {
    const Encoded e = EncodeFlac({rate, 1, 16, 0, -1}, 4000, rng);
    EXPECT_THAT(
        std::string(DecodeStatus(kFlac, {}, e.bytes, rng).message()),
        HasSubstr(absl::StrCat("STREAMINFO sample rate ", rate, " Hz is outside 8000..192000 Hz")));
  }
  const Encoded e = EncodeFlac({44100, 2, 16, 0, -1}, 4000, rng);
  absl::Status s = DecodeStatus({AudioEncoding::kFlac, 16000, 0}, {}, e.bytes, rng);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("STREAMINFO says 44100 Hz but sample_rate_hz declares "
                        "16000 Hz; declare 44100 or 0"));
  s = DecodeStatus({AudioEncoding::kFlac, 0, 1}, {}, e.bytes, rng);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("STREAMINFO says 2 channels but channels declares 1; declare 2 or 0"));
}

TEST(FlacDecoderTest, StreamEndingInsideTheHeaderIsAnError) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({16000, 1, 16, 0, 1000}, 4000, rng);
  for (size_t n : {size_t{2}, size_t{20}, e.frame_offsets[0] - 10}) {
    const absl::Status s = DecodeStatus(kFlac, {}, Prefix(e.bytes, n), rng);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat(
                    "ended after ", n, " bytes, inside its header (",
                    n <= 42 ? "before STREAMINFO was complete" : "in a metadata block after")));
  }
  // Ending right after the header: no frames, but nothing is wrong.
  EXPECT_TRUE(DecodeStatus(kFlac, {}, Prefix(e.bytes, e.frame_offsets[0]), rng).ok());
}

TEST(FlacDecoderTest, CorruptFramesAreRejectedWithTheirPosition) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({16000, 2, 16, 1024, -1}, 16000, rng);
  const size_t frame = 3;
  const size_t start = e.frame_offsets[frame];
  const size_t end = e.frame_offsets[frame + 1];

  Bytes flipped = e.bytes;
  flipped[start + 10 + rng() % (end - start - 10)] ^= 0x10;
  absl::Status s = DecodeStatus(kFlac, {}, flipped, rng);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("FLAC: corrupt stream: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("after 3072 decoded samples"));

  Bytes junk = e.bytes;
  junk.insert(junk.begin() + static_cast<ptrdiff_t>(start), {'j', 'u', 'n', 'k'});
  s = DecodeStatus(kFlac, {}, junk, rng);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("bytes that are not a FLAC frame (lost frame sync)"));

  // Frames of a 22050 Hz stream after the frames of a 16000 Hz one.
  const Encoded other = EncodeFlac({22050, 2, 16, 1024, -1}, 8000, rng);
  Bytes spliced = e.bytes;
  spliced.insert(spliced.end(), other.bytes.begin() + other.frame_offsets[0], other.bytes.end());
  s = DecodeStatus(kFlac, {}, spliced, rng);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("the frame at byte ", e.bytes.size(),
                                     " is 22050 Hz, 2 channels, 16 bits but "
                                     "STREAMINFO says 16000 Hz")));
}

TEST(FlacDecoderTest, BufferAndPerPieceLimits) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({48000, 2, 24, 4096, -1}, 48000, rng);
  ASSERT_GT(e.frame_offsets[2] - e.frame_offsets[1], 4000u);
  StreamDecoderOptions options;
  options.max_buffered_bytes = 4000;
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d = StreamDecoder::Create(kFlac, options);
  ASSERT_TRUE(d.ok());
  std::vector<float> out;
  const absl::Status s = (*d)->Feed(Prefix(e.bytes, e.frame_offsets[1] + 4001), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("a frame starting at byte ", e.frame_offsets[1],
                                     " is still incomplete after 4001 bytes (more than "
                                     "max_buffered_bytes = 4000)")));

  // A minute of digital silence compresses to a few kilobytes: the per-piece limit stops it
  // from expanding beyond max_feed_seconds in one call.
  const Encoded silence = EncodeFlac({48000, 1, 16, 4096, -1}, 48000 * 60, rng, true);
  ASSERT_LT(silence.bytes.size(), 50'000u);
  options = {};
  options.max_feed_seconds = 10;
  d = StreamDecoder::Create(kFlac, options);
  ASSERT_TRUE(d.ok());
  out.clear();
  EXPECT_THAT(std::string((*d)->Feed(silence.bytes, &out).message()),
              HasSubstr("decode to more than 10 s (the limit for one piece, max_feed_seconds)"));
  EXPECT_LE(out.size(), 16000u * 10);
}

// Random damage to a valid stream never crashes (run under ASan in the debug preset) and always
// ends in OK or InvalidArgument.
TEST(FlacDecoderTest, CorruptedStreamsNeverCrash) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const Encoded e = EncodeFlac({16000, 2, 16, 512, 100}, 8000, rng);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Bytes bad = codec_test::Mutate(e.bytes, rng);
    const absl::Status s = DecodeStatus(kFlac, {}, bad, rng);
    ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
    failures += !s.ok();
  }
  EXPECT_GT(failures, 100) << "most random damage must be detected";
}

}  // namespace
}  // namespace waav::audio
