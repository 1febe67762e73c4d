// The Ogg Opus StreamDecoder against streams encoded in the test with libopus and paged with
// libogg, following RFC 7845.
#include <ogg/ogg.h>
#include <opus_multistream.h>

#include <cmath>
#include <cstring>
#include <functional>
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

constexpr int kRate = 48000;

struct Page {
  Bytes header;
  Bytes body;
};

Bytes Join(const std::vector<Page>& pages) {
  Bytes b;
  for (const Page& p : pages) {
    b.insert(b.end(), p.header.begin(), p.header.end());
    b.insert(b.end(), p.body.begin(), p.body.end());
  }
  return b;
}

// Recomputes a page's CRC after a test has edited it.
void Rechecksum(Page& p) {
  ogg_page og{p.header.data(), static_cast<long>(p.header.size()), p.body.data(),
              static_cast<long>(p.body.size())};
  ogg_page_checksum_set(&og);
}

struct OpusParams {
  int coded_channels = 1;  // channels the encoder sees
  int family = 0;
  // Family 1 only: OpusHead's channel count and mapping; defaults to the coded layout.
  int head_channels = 0;
  std::vector<uint8_t> head_mapping = {};
  uint32_t head_rate_hz = 48000;
  int16_t gain_q8 = 0;
  int bitrate = 64000;
  int frame_samples = 960;  // 20 ms
  size_t tags_comment_bytes = 0;
  uint8_t version = 1;
  int packets_per_page = 5;  // 100 ms pages at 20 ms packets, as a live encoder would send
  // Replaces encoded audio packet `i` (for corrupt-packet tests).
  std::function<void(int i, Bytes& packet)> edit_packet = nullptr;
};

struct OpusStream {
  std::vector<Page> pages;  // [0] OpusHead, then the OpusTags pages, then audio
  size_t first_audio_page = 0;
  int pre_skip = 0;
  std::vector<float> reference;  // mono average of the channels at 48 kHz, the signal's length
  Bytes bytes;                   // all pages
};

// Channel c: two tones of its own, at 0.2 and 0.15 of full scale. Tones, not noise: Opus codes
// noise perceptually, so only tonal signals can be compared sample by sample.
float Tone(int c, size_t i) {
  const double t = static_cast<double>(i) / kRate;
  return static_cast<float>(0.2 * std::sin(2 * std::numbers::pi * (300 + 170 * c) * t) +
                            0.15 * std::sin(2 * std::numbers::pi * (1100 + 230 * c) * t + c));
}

std::vector<Page> Flush(ogg_stream_state& os, bool flush) {
  std::vector<Page> pages;
  ogg_page og;
  while (flush ? ogg_stream_flush(&os, &og) : ogg_stream_pageout(&os, &og)) {
    pages.push_back(
        {Bytes(og.header, og.header + og.header_len), Bytes(og.body, og.body + og.body_len)});
  }
  return pages;
}

void Append(std::vector<Page>& to, std::vector<Page> more) {
  to.insert(to.end(), more.begin(), more.end());
}

OpusStream EncodeOggOpus(const OpusParams& p, size_t samples) {
  OpusStream s;
  // Coded layout: family 0 is one stream (coupled if stereo); family 1 here codes channel pairs
  // as coupled streams and a last odd channel as a mono stream.
  const int coded = p.coded_channels;
  const int coupled = coded / 2;
  const int streams = coupled + coded % 2;
  std::vector<uint8_t> coded_mapping(coded);
  for (int c = 0; c < coded; ++c) coded_mapping[c] = static_cast<uint8_t>(c);
  int error = 0;
  OpusMSEncoder* enc = opus_multistream_encoder_create(
      kRate, coded, streams, coupled, coded_mapping.data(), OPUS_APPLICATION_AUDIO, &error);
  EXPECT_EQ(error, OPUS_OK);
  opus_multistream_encoder_ctl(enc, OPUS_SET_BITRATE(p.bitrate));
  opus_int32 lookahead = 0;
  opus_multistream_encoder_ctl(enc, OPUS_GET_LOOKAHEAD(&lookahead));
  s.pre_skip = lookahead;

  const int head_channels = p.head_channels > 0 ? p.head_channels : coded;
  const std::vector<uint8_t> head_mapping = p.head_mapping.empty() ? coded_mapping : p.head_mapping;
  for (size_t i = 0; i < samples; ++i) {
    double sum = 0;
    for (int c = 0; c < head_channels; ++c) {
      if (head_mapping.size() > static_cast<size_t>(c) && head_mapping[c] == 255) continue;
      sum += Tone(c, i);
    }
    s.reference.push_back(static_cast<float>(sum / head_channels));
  }

  ogg_stream_state os;
  ogg_stream_init(&os, 0x5EED);
  Bytes head = {'O', 'p', 'u', 's',       'H',
                'e', 'a', 'd', p.version, static_cast<uint8_t>(head_channels)};
  auto put16 = [](Bytes& b, uint16_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
  };
  put16(head, static_cast<uint16_t>(s.pre_skip));
  put16(head, static_cast<uint16_t>(p.head_rate_hz));
  put16(head, static_cast<uint16_t>(p.head_rate_hz >> 16));
  put16(head, static_cast<uint16_t>(p.gain_q8));
  head.push_back(static_cast<uint8_t>(p.family));
  if (p.family != 0) {
    head.push_back(static_cast<uint8_t>(streams));
    head.push_back(static_cast<uint8_t>(coupled));
    head.insert(head.end(), head_mapping.begin(), head_mapping.end());
  }
  ogg_packet packet{head.data(), static_cast<long>(head.size()), 1, 0, 0, 0};
  ogg_stream_packetin(&os, &packet);
  Append(s.pages, Flush(os, true));

  Bytes tags = {'O', 'p', 'u', 's', 'T', 'a', 'g', 's', 4, 0, 0, 0, 'w', 'a', 'a', 'v'};
  const uint32_t comments = p.tags_comment_bytes > 0 ? 1 : 0;
  for (int i = 0; i < 4; ++i) tags.push_back(static_cast<uint8_t>(comments >> (8 * i)));
  if (comments > 0) {
    const uint32_t len = static_cast<uint32_t>(p.tags_comment_bytes);
    for (int i = 0; i < 4; ++i) tags.push_back(static_cast<uint8_t>(len >> (8 * i)));
    tags.push_back('X');
    tags.push_back('=');
    tags.resize(tags.size() + len - 2, 'a');
  }
  packet = {tags.data(), static_cast<long>(tags.size()), 0, 0, 0, 1};
  ogg_stream_packetin(&os, &packet);
  Append(s.pages, Flush(os, true));
  s.first_audio_page = s.pages.size();

  // Encode pre_skip + samples so that the decoder, after dropping pre_skip, has every input
  // sample; the last packet's granule position marks the end (RFC 7845 4.4).
  const size_t needed = samples + static_cast<size_t>(s.pre_skip);
  const size_t packets = (needed + p.frame_samples - 1) / p.frame_samples;
  std::vector<float> pcm(static_cast<size_t>(p.frame_samples) * coded);
  Bytes out(4000 * static_cast<size_t>(streams));
  for (size_t k = 0; k < packets; ++k) {
    for (int i = 0; i < p.frame_samples; ++i) {
      const size_t n = k * p.frame_samples + i;
      for (int c = 0; c < coded; ++c) pcm[i * coded + c] = n < samples ? Tone(c, n) : 0.0f;
    }
    const int len = opus_multistream_encode_float(enc, pcm.data(), p.frame_samples, out.data(),
                                                  static_cast<opus_int32>(out.size()));
    EXPECT_GT(len, 0);
    Bytes data(out.begin(), out.begin() + len);
    if (p.edit_packet) p.edit_packet(static_cast<int>(k), data);
    const bool last = k + 1 == packets;
    const int64_t granule =
        last ? static_cast<int64_t>(needed) : static_cast<int64_t>((k + 1) * p.frame_samples);
    packet = {data.data(), static_cast<long>(data.size()), 0, last ? 1 : 0,
              granule,     static_cast<ogg_int64_t>(k + 2)};
    ogg_stream_packetin(&os, &packet);
    Append(s.pages, Flush(os, last || (k + 1) % p.packets_per_page == 0));
  }
  ogg_stream_clear(&os);
  opus_multistream_encoder_destroy(enc);
  s.bytes = Join(s.pages);
  return s;
}

const AudioFormatSpec kOpus{AudioEncoding::kOggOpus, 0, 0};

absl::Status DecodeStatus(const AudioFormatSpec& format, const Bytes& bytes, std::mt19937& rng,
                          const StreamDecoderOptions& options = {}) {
  return codec_test::DecodeAll(format, options, bytes, rng).status();
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(OggOpusDecoderTest, DecodesCloseToTheSignalInRandomPieces) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  struct Case {
    const char* name;
    OpusParams params;
  };
  std::vector<Case> cases = {
      {"mono 20 ms", {}},
      {"stereo 10 ms", {.coded_channels = 2, .bitrate = 96000, .frame_samples = 480}},
      {"mono 60 ms, 16 kHz capture", {.head_rate_hz = 16000, .frame_samples = 2880}},
      {"family 1, 3 coded + 1 silent channel",
       {.coded_channels = 3,
        .family = 1,
        .head_channels = 4,
        .head_mapping = {0, 1, 2, 255},
        .bitrate = 256000}},
      {"mono, OpusTags over 4 pages", {.tags_comment_bytes = 200'000}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const size_t samples = kRate / 2 + rng() % 20000;
    const OpusStream s = EncodeOggOpus(c.params, samples);
    const int channels =
        c.params.head_channels > 0 ? c.params.head_channels : c.params.coded_channels;
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create(kOpus, codec_test::NativeRate());
    ASSERT_TRUE(d.ok());
    std::vector<float> out;
    const absl::Status status = codec_test::FeedInRandomPieces(**d, s.bytes, rng, &out);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ((*d)->input_sample_rate_hz(), kRate);
    EXPECT_EQ((*d)->input_channels(), channels);
    EXPECT_EQ((*d)->trailing_bytes_dropped(), 0);
    // Pre-skip removed and the end trimmed to the last granule position: exactly the signal.
    EXPECT_EQ((*d)->input_samples_decoded(), static_cast<int64_t>(samples));
    ASSERT_EQ(out.size(), samples);
    // Opus at these bitrates reproduces the tones with an SNR of 35-41 dB (measured over many
    // seeds); 25 dB fails for a misalignment of more than a sample or two, a wrong pre-skip, a
    // wrong channel mapping or mix.
    const double snr = codec_test::SnrDb(s.reference, out);
    EXPECT_GT(snr, 25) << "SNR " << snr << " dB";
    RecordProperty(absl::StrCat("snr_db_", c.name), std::to_string(snr));

    absl::StatusOr<std::vector<float>> out_16k =
        codec_test::DecodeAll(kOpus, StreamDecoderOptions{}, s.bytes, rng);
    ASSERT_TRUE(out_16k.ok()) << out_16k.status();
    absl::StatusOr<std::vector<float>> reference_16k = Resample(s.reference, kRate, 16000);
    ASSERT_TRUE(reference_16k.ok());
    EXPECT_EQ(out_16k->size(), reference_16k->size());
    EXPECT_GT(codec_test::SnrDb(*reference_16k, *out_16k), 25);
  }
}

TEST(OggOpusDecoderTest, AppliesTheOutputGain) {
  std::mt19937 rng(codec_test::FreshSeed());
  const OpusStream plain = EncodeOggOpus({}, kRate / 2);
  const OpusStream louder = EncodeOggOpus({.gain_q8 = 1541}, kRate / 2);  // +6.02 dB: x2
  absl::StatusOr<std::vector<float>> a =
      codec_test::DecodeAll(kOpus, codec_test::NativeRate(), plain.bytes, rng);
  absl::StatusOr<std::vector<float>> b =
      codec_test::DecodeAll(kOpus, codec_test::NativeRate(), louder.bytes, rng);
  ASSERT_TRUE(a.ok() && b.ok());
  double ea = 0, eb = 0;
  for (float x : *a) ea += double{x} * x;
  for (float x : *b) eb += double{x} * x;
  EXPECT_NEAR(std::sqrt(eb / ea), 2.0, 0.01);
}

TEST(OggOpusDecoderTest, DeclaredFormatMustAgreeWithOpusHead) {
  std::mt19937 rng(codec_test::FreshSeed());
  const OpusStream s = EncodeOggOpus({.coded_channels = 2, .head_rate_hz = 16000}, kRate / 4);
  EXPECT_TRUE(DecodeStatus({AudioEncoding::kOggOpus, 16000, 2}, s.bytes, rng).ok());
  absl::Status st = DecodeStatus({AudioEncoding::kOggOpus, 48000, 0}, s.bytes, rng);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("OpusHead says it was captured at 16000 Hz but "
                                     "sample_rate_hz declares 48000 Hz; declare 16000 or 0"));
  st = DecodeStatus({AudioEncoding::kOggOpus, 0, 1}, s.bytes, rng);
  EXPECT_THAT(Message(st),
              HasSubstr("OpusHead says 2 channels but channels declares 1; declare 2 or 0"));
  // OpusHead's rate 0 means "unknown": any declared rate is accepted.
  const OpusStream unknown = EncodeOggOpus({.head_rate_hz = 0}, kRate / 4);
  EXPECT_TRUE(DecodeStatus({AudioEncoding::kOggOpus, 22050, 1}, unknown.bytes, rng).ok());
}

TEST(OggOpusDecoderTest, StreamCutInsideAPageKeepsTheCompletePages) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const OpusStream s = EncodeOggOpus({}, kRate * 2);
  ASSERT_GT(s.pages.size(), s.first_audio_page + 3);
  absl::StatusOr<std::vector<float>> full =
      codec_test::DecodeAll(kOpus, codec_test::NativeRate(), s.bytes, rng);
  ASSERT_TRUE(full.ok());
  const size_t page = s.first_audio_page + 1 + rng() % (s.pages.size() - s.first_audio_page - 2);
  for (size_t cut :
       {size_t{0}, 1 + rng() % (s.pages[page].header.size() + s.pages[page].body.size() - 1)}) {
    Bytes bytes = Join(std::vector<Page>(s.pages.begin(), s.pages.begin() + page));
    const Bytes rest = Join({s.pages[page]});
    bytes.insert(bytes.end(), rest.begin(), rest.begin() + static_cast<ptrdiff_t>(cut));
    absl::StatusOr<std::unique_ptr<StreamDecoder>> d =
        StreamDecoder::Create(kOpus, codec_test::NativeRate());
    ASSERT_TRUE(d.ok());
    std::vector<float> out;
    ASSERT_TRUE(codec_test::FeedInRandomPieces(**d, bytes, rng, &out).ok());
    EXPECT_EQ((*d)->trailing_bytes_dropped(), static_cast<int64_t>(cut));
    ASSERT_GT(out.size(), 0u);
    ASSERT_LT(out.size(), full->size());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), full->begin()));
  }
}

TEST(OggOpusDecoderTest, StreamEndingInsideTheHeadersIsAnError) {
  std::mt19937 rng(codec_test::FreshSeed());
  const OpusStream s = EncodeOggOpus({.tags_comment_bytes = 100'000}, kRate / 4);
  const size_t head = s.pages[0].header.size() + s.pages[0].body.size();
  for (size_t n : {size_t{3}, head - 1, head + 1000}) {
    const absl::Status st = DecodeStatus(kOpus, Bytes(s.bytes.begin(), s.bytes.begin() + n), rng);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(st),
                HasSubstr(absl::StrCat("ended after ", n, " bytes, inside its headers (before the ",
                                       n < head ? "OpusHead page" : "OpusTags packet")));
  }
}

// Builds a stream and lets `edit` change its pages (re-checksummed afterwards).
Bytes Edited(const OpusStream& s, const std::function<void(std::vector<Page>&)>& edit) {
  std::vector<Page> pages = s.pages;
  edit(pages);
  for (Page& p : pages) Rechecksum(p);
  return Join(pages);
}

TEST(OggOpusDecoderTest, RejectsBrokenStreamStructure) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const OpusStream s = EncodeOggOpus({}, kRate);
  const size_t audio = s.first_audio_page;
  const size_t pages = s.pages.size();
  ASSERT_GT(pages, audio + 3);
  struct Case {
    const char* name;
    Bytes bytes;
    std::string message;
  };
  const Bytes wav = {'R', 'I', 'F', 'F', 0x24, 0, 0, 0, 'W', 'A', 'V', 'E'};
  Bytes junk_page = s.bytes;
  junk_page[s.pages[0].header.size() + s.pages[0].body.size() + 30] ^= 0x01;  // tags page body
  const std::vector<Case> cases = {
      {"not Ogg", wav, "the stream does not start with an Ogg page (\"OggS\"); it starts with \"R"},
      {"checksum", junk_page, "a page whose checksum does not match"},
      {"first page not BOS", Edited(s, [](std::vector<Page>& p) { p[0].header[5] &= ~0x02; }),
       "the first Ogg page is not a beginning-of-stream page"},
      {"not Opus",
       Edited(s, [](std::vector<Page>& p) { std::memcpy(p[0].body.data(), "\x01vorbis\0", 8); }),
       "not \"OpusHead\": the stream is not Ogg Opus"},
      {"no OpusTags",
       Edited(s,
              [&](std::vector<Page>& p) {
                p.erase(p.begin() + 1, p.begin() + static_cast<ptrdiff_t>(audio));
                for (size_t i = 1; i < p.size(); ++i) p[i].header[18] = static_cast<uint8_t>(i);
              }),
       "the second Ogg page (byte"},
      {"missing page",
       Edited(
           s,
           [&](std::vector<Page>& p) { p.erase(p.begin() + static_cast<ptrdiff_t>(audio + 1)); }),
       absl::StrCat("Ogg page ", audio + 1, " is missing")},
      {"other serial", Edited(s, [&](std::vector<Page>& p) { p[audio + 1].header[14] ^= 1; }),
       "belongs to another logical stream"},
      {"page after the end", Edited(s, [&](std::vector<Page>& p) { p.push_back(p[audio]); }),
       "follows the end-of-stream page; chained or concatenated Ogg streams are not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status st = DecodeStatus(kOpus, c.bytes, rng);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(st), HasSubstr(c.message));
    EXPECT_THAT(Message(st), HasSubstr("OGG_OPUS: "));
  }
}

// OpusHead variants: (bytes after "OpusHead" from the version on) -> error.
TEST(OggOpusDecoderTest, RejectsBadOpusHeads) {
  std::mt19937 rng(codec_test::FreshSeed());
  const OpusStream s = EncodeOggOpus({}, kRate / 4);
  auto with_head = [&](const Bytes& fields) {
    return Edited(s, [&](std::vector<Page>& p) {
      Bytes body = {'O', 'p', 'u', 's', 'H', 'e', 'a', 'd'};
      body.insert(body.end(), fields.begin(), fields.end());
      p[0].body = body;
      p[0].header[27] = static_cast<uint8_t>(body.size());  // one segment
    });
  };
  // version, channels, pre-skip (2), rate (4), gain (2), family[, streams, coupled, mapping]
  struct Case {
    const char* name;
    Bytes fields;
    absl::StatusCode code;
    std::string message;
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  const std::vector<Case> cases = {
      {"short", {1, 1, 0, 0}, kBad, "OpusHead is 12 bytes, shorter than 19"},
      {"version 16", {16, 1, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 0}, kBad, "version 16 is not supported"},
      {"no channels", {1, 0, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 0}, kBad, "declares 0 channels"},
      {"family 0, 3 ch",
       {1, 3, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 0},
       kBad,
       "3 channels with mapping family 0, which allows 1 or 2"},
      {"family 1, 9 ch", {1, 9, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 1}, kBad, "which allows 1..8"},
      {"family 1, no table",
       {1, 2, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 1, 1, 1},
       kBad,
       "too short for its 2-channel mapping table"},
      {"family 1, 0 streams",
       {1, 1, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 1, 0, 0, 0},
       kBad,
       "0 streams of which 0 coupled"},
      {"family 1, bad index",
       {1, 2, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 1, 1, 0, 0, 1},
       kBad,
       "maps a channel to decoded channel 1 of only 1"},
      {"family 2",
       {1, 4, 0, 0, 0x80, 0xBB, 0, 0, 0, 0, 2, 4, 0, 0, 1, 2, 3},
       absl::StatusCode::kUnimplemented,
       "channel mapping family 2 is not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status st = DecodeStatus(kOpus, with_head(c.fields), rng);
    EXPECT_EQ(st.code(), c.code);
    EXPECT_THAT(Message(st), HasSubstr(c.message));
  }
}

TEST(OggOpusDecoderTest, RejectsCorruptPacketsAndAudioOnTheTagsPage) {
  std::mt19937 rng(codec_test::FreshSeed());
  // Code 3 (several frames) with a frame count of 0: invalid by RFC 6716 3.2.5.
  OpusStream s = EncodeOggOpus({.edit_packet =
                                    [](int i, Bytes& p) {
                                      if (i == 7) p = {static_cast<uint8_t>(p[0] | 3), 0};
                                    }},
                               kRate / 2);
  absl::Status st = DecodeStatus(kOpus, s.bytes, rng);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("corrupt Opus packet 8 (2 bytes, page at byte"));

  s = EncodeOggOpus({.edit_packet =
                         [](int i, Bytes& p) {
                           if (i == 2) p.clear();
                         }},
                    kRate / 2);
  st = DecodeStatus(kOpus, s.bytes, rng);
  EXPECT_THAT(Message(st), HasSubstr("Opus packet 3 (page at byte"));
  EXPECT_THAT(Message(st), HasSubstr("is empty"));

  // The first audio page's packets moved onto the tags page.
  s = EncodeOggOpus({}, kRate / 2);
  const Bytes merged = Edited(s, [&](std::vector<Page>& p) {
    Page& tags = p[1];
    Page& audio = p[2];
    const int tag_segments = tags.header[26];
    const int audio_segments = audio.header[26];
    Bytes header(tags.header.begin(), tags.header.begin() + 27);
    header[26] = static_cast<uint8_t>(tag_segments + audio_segments);
    header.insert(header.end(), tags.header.begin() + 27, tags.header.end());
    header.insert(header.end(), audio.header.begin() + 27, audio.header.end());
    std::memcpy(header.data() + 6, audio.header.data() + 6, 8);  // the audio's granule position
    tags.header = header;
    tags.body.insert(tags.body.end(), audio.body.begin(), audio.body.end());
    p.erase(p.begin() + 2);
    for (size_t i = 2; i < p.size(); ++i) p[i].header[18] = static_cast<uint8_t>(i);
  });
  st = DecodeStatus(kOpus, merged, rng);
  EXPECT_THAT(Message(st), HasSubstr("holds audio after the OpusTags header"));
}

TEST(OggOpusDecoderTest, BufferAndPerPieceLimits) {
  std::mt19937 rng(codec_test::FreshSeed());
  const OpusStream s = EncodeOggOpus({.bitrate = 256000}, kRate);
  const Page& page = s.pages[s.first_audio_page];
  ASSERT_GT(page.body.size(), 2000u);
  size_t start = 0;
  for (size_t i = 0; i < s.first_audio_page; ++i) {
    start += s.pages[i].header.size() + s.pages[i].body.size();
  }
  StreamDecoderOptions options;
  options.max_buffered_bytes = 1024;
  absl::StatusOr<std::unique_ptr<StreamDecoder>> d = StreamDecoder::Create(kOpus, options);
  ASSERT_TRUE(d.ok());
  std::vector<float> out;
  absl::Status st = (*d)->Feed(Bytes(s.bytes.begin(), s.bytes.begin() + start + 2000), &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr(absl::StrCat("2000 bytes near byte ", start,
                                                  " do not complete an Ogg page or Opus packet "
                                                  "(more than max_buffered_bytes = 1024)")));

  // Two-byte packets that each decode to 120 ms (code 3, two empty frames of 60 ms): a few
  // kilobytes expand to minutes. The per-piece limit stops the expansion.
  const OpusStream bomb = EncodeOggOpus({.frame_samples = 2880,
                                         .edit_packet =
                                             [](int, Bytes& p) {
                                               p = {static_cast<uint8_t>((3 << 3) | 3), 2};
                                             }},
                                        kRate * 60);
  ASSERT_LT(bomb.bytes.size(), 20'000u);
  options = {};
  options.max_feed_seconds = 30;
  d = StreamDecoder::Create(kOpus, options);
  ASSERT_TRUE(d.ok());
  out.clear();
  st = (*d)->Feed(bomb.bytes, &out);
  EXPECT_THAT(Message(st), HasSubstr("decode to more than 30 s (the limit for one piece"));
  EXPECT_LE(out.size(), 16000u * 30);
}

// Random damage to a valid stream never crashes (run under ASan in the debug preset) and ends in
// OK, InvalidArgument or (a mangled OpusHead asking for mapping family 2+) Unimplemented.
TEST(OggOpusDecoderTest, CorruptedStreamsNeverCrash) {
  const uint32_t seed = codec_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  const OpusStream s = EncodeOggOpus({.coded_channels = 2}, kRate / 2);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Bytes bad = codec_test::Mutate(s.bytes, rng);
    const absl::Status st = DecodeStatus(kOpus, bad, rng);
    ASSERT_TRUE(st.ok() || st.code() == absl::StatusCode::kInvalidArgument ||
                st.code() == absl::StatusCode::kUnimplemented)
        << st;
    failures += !st.ok();
  }
  EXPECT_GT(failures, 100) << "most random damage must be detected";
}

}  // namespace
}  // namespace waav::audio
