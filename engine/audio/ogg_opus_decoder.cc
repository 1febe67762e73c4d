// Ogg Opus (RFC 7845): libogg finds pages (capture pattern, CRC) and joins packets; libopus's
// multistream decoder decodes them at 48 kHz.
//
// The stream's layout is checked as RFC 7845 section 3 gives it: the first page holds the
// OpusHead packet alone (beginning-of-stream flag set); the OpusTags packet starts on the second
// page and its last page ends with it; audio packets follow on fresh pages. The tag pages are
// skipped page by page without joining the tags packet, so large tags (cover art) cost no
// memory. Only one logical stream is decoded: pages of another serial number (multiplexed or
// chained streams) are an error, as is a gap in page sequence numbers.
//
// Trimming follows RFC 7845 section 4: the first `pre_skip` decoded samples are dropped, and on
// the end-of-stream page the granule position (48 kHz samples including the pre-skip) marks the
// end of the signal, so samples past it are dropped. A start offset (a first audio page whose
// granule position implies the stream begins later than sample 0) is ignored: the decoded samples
// are counted from the start of the stream.

#include <ogg/ogg.h>
#include <opus_multistream.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/audio/decoder_factories.h"
#include "engine/runtime/status.h"

namespace waav::audio::internal {
namespace {

constexpr int kOpusRateHz = 48000;
constexpr int kMaxOpusFrameSamples = 5760;  // 120 ms at 48 kHz: the longest Opus packet
constexpr size_t kPieceBytes = 64 * 1024;   // bytes handed to libogg at a time
constexpr int kOpusHeadMinBytes = 19;

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t U32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

bool StartsWith(const uint8_t* data, long size, const char (&magic)[9]) {
  return size >= 8 && std::memcmp(data, magic, 8) == 0;
}

// The lacing value of a page's last segment: below 255 means its last packet ends on the page.
bool PageEndsWithCompletePacket(const ogg_page& page) {
  const int segments = page.header[26];
  return segments > 0 && page.header[27 + segments - 1] < 255;
}

class OggOpusDecoder final : public StreamDecoder {
 public:
  OggOpusDecoder(const AudioFormatSpec& format, const StreamDecoderOptions& options)
      : StreamDecoder(format, options) {
    ogg_sync_init(&sync_);
  }

  ~OggOpusDecoder() override {
    ogg_sync_clear(&sync_);
    if (stream_ready_) ogg_stream_clear(&stream_);
    if (opus_ != nullptr) opus_multistream_decoder_destroy(opus_);
  }

 protected:
  absl::Status DecodeBytes(absl::Span<const uint8_t> bytes) override {
    // Say at once when the bytes are not Ogg at all (libogg would wait for 27 bytes and then
    // report lost sync).
    for (size_t i = 0; i < bytes.size() && magic_seen_.size() < 4; ++i) {
      magic_seen_.push_back(static_cast<char>(bytes[i]));
      if (magic_seen_.back() != "OggS"[magic_seen_.size() - 1]) {
        return DataError(
            absl::StrCat("the stream does not start with an Ogg page (\"OggS\"); it starts with \"",
                         absl::CHexEscape(magic_seen_), "\""));
      }
    }
    while (!bytes.empty()) {
      const size_t piece = std::min(bytes.size(), kPieceBytes);
      char* buffer = ogg_sync_buffer(&sync_, static_cast<long>(piece));
      if (buffer == nullptr) return absl::ResourceExhaustedError("OGG_OPUS: out of memory");
      std::memcpy(buffer, bytes.data(), piece);
      ogg_sync_wrote(&sync_, static_cast<long>(piece));
      written_ += static_cast<int64_t>(piece);
      bytes.remove_prefix(piece);
      RETURN_IF_ERROR(ReadPages());
      const int64_t held = Held();
      if (held > options().max_buffered_bytes) {
        return DataError(absl::StrCat(held, " bytes near byte ", page_offset_,
                                      " do not complete an Ogg page or Opus packet (more than "
                                      "max_buffered_bytes = ",
                                      options().max_buffered_bytes, "); the stream is corrupt"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status DecodeEnd() override {
    if (stage_ == Stage::kHead || stage_ == Stage::kTags || stage_ == Stage::kMoreTags) {
      if (bytes_fed() == 0) return absl::OkStatus();
      return DataError(
          absl::StrCat("the stream ended after ", bytes_fed(), " bytes, inside its headers (",
                       stage_ == Stage::kHead ? "before the OpusHead page was complete"
                                              : "before the OpusTags packet was complete",
                       "); no audio"));
    }
    AddTrailingBytesDropped(Held());
    return absl::OkStatus();
  }

 private:
  enum class Stage { kHead, kTags, kMoreTags, kAudio, kEnded };

  // Input held but not decoded: a partial page in libogg's sync buffer, a packet continued on
  // pages still to come.
  int64_t Held() const {
    int64_t held = sync_.fill - sync_.returned;
    if (stream_ready_) held += stream_.body_fill - stream_.body_returned;
    return held;
  }

  absl::Status ReadPages() {
    while (true) {
      page_offset_ = written_ - (sync_.fill - sync_.returned);
      ogg_page page;
      const int result = ogg_sync_pageout(&sync_, &page);
      if (result == 0) return absl::OkStatus();
      if (result < 0) {
        return DataError(absl::StrCat(
            "corrupt Ogg data at byte ", page_offset_,
            ": not an Ogg page, or a page whose checksum does not match (lost page sync)"));
      }
      RETURN_IF_ERROR(HandlePage(page));
    }
  }

  absl::Status HandlePage(const ogg_page& page) {
    const int serial = ogg_page_serialno(&page);
    const int64_t sequence = static_cast<int64_t>(static_cast<uint32_t>(ogg_page_pageno(&page)));
    if (stage_ == Stage::kHead) return ReadHead(page, serial, sequence);
    if (stage_ == Stage::kEnded) {
      return DataError(absl::StrCat("an Ogg page at byte ", page_offset_,
                                    " follows the end-of-stream page; chained or concatenated "
                                    "Ogg streams are not supported"));
    }
    if (serial != serial_ || ogg_page_bos(&page)) {
      return DataError(absl::StrCat(
          "the Ogg page at byte ", page_offset_, " belongs to another logical stream (serial ",
          static_cast<uint32_t>(serial), ", Opus is ", static_cast<uint32_t>(serial_),
          "); multiplexed or chained Ogg streams are not supported"));
    }
    if (sequence != next_sequence_) {
      return DataError(absl::StrCat("Ogg page ", next_sequence_, " is missing: the page at byte ",
                                    page_offset_, " has sequence number ", sequence));
    }
    ++next_sequence_;
    switch (stage_) {
      case Stage::kTags:
        if (ogg_page_continued(&page) || !StartsWith(page.body, page.body_len, "OpusTags")) {
          return DataError(absl::StrCat("the second Ogg page (byte ", page_offset_,
                                        ") does not start with the OpusTags header"));
        }
        [[fallthrough]];
      case Stage::kMoreTags:
        if (ogg_page_packets(&page) == 0) {
          stage_ = Stage::kMoreTags;
          return absl::OkStatus();
        }
        if (ogg_page_packets(&page) > 1 || !PageEndsWithCompletePacket(page)) {
          return DataError(absl::StrCat("the Ogg page at byte ", page_offset_,
                                        " holds audio after the OpusTags header; RFC 7845 "
                                        "requires audio to start on a fresh page"));
        }
        // Reset: a fresh stream state expects page 0 and would see a gap before this page.
        if (ogg_stream_init(&stream_, serial_) != 0 || ogg_stream_reset(&stream_) != 0) {
          return absl::ResourceExhaustedError("OGG_OPUS: out of memory");
        }
        stream_ready_ = true;
        stage_ = Stage::kAudio;
        return absl::OkStatus();
      default:
        return ReadAudioPage(page);
    }
  }

  absl::Status ReadHead(const ogg_page& page, int serial, int64_t sequence) {
    if (!ogg_page_bos(&page)) {
      return DataError(
          "the first Ogg page is not a beginning-of-stream page; the stream must start with "
          "the OpusHead page");
    }
    if (!StartsWith(page.body, page.body_len, "OpusHead")) {
      const long n = std::min(page.body_len, 8L);
      return DataError(
          absl::StrCat("the first Ogg packet starts with \"",
                       absl::CHexEscape(std::string(reinterpret_cast<const char*>(page.body), n)),
                       "\", not \"OpusHead\": the stream is not Ogg Opus"));
    }
    if (ogg_page_continued(&page) || ogg_page_packets(&page) != 1 ||
        !PageEndsWithCompletePacket(page)) {
      return DataError("the OpusHead packet must be alone on the first Ogg page (RFC 7845)");
    }
    RETURN_IF_ERROR(ParseOpusHead(page.body, page.body_len));
    serial_ = serial;
    next_sequence_ = sequence + 1;
    stage_ = Stage::kTags;
    return absl::OkStatus();
  }

  absl::Status ParseOpusHead(const uint8_t* p, long size) {
    if (size < kOpusHeadMinBytes) {
      return DataError(
          absl::StrCat("OpusHead is ", size, " bytes, shorter than ", kOpusHeadMinBytes));
    }
    const int version = p[8];
    const int channels = p[9];
    pre_skip_ = U16(p + 10);
    const uint32_t header_rate_hz = U32(p + 12);
    const int16_t gain_q8 = static_cast<int16_t>(U16(p + 16));
    const int family = p[18];
    if ((version & 0xF0) != 0) {
      return DataError(absl::StrCat("OpusHead version ", version,
                                    " is not supported (RFC 7845 decoders read 0..15)"));
    }
    if (channels == 0) return DataError("OpusHead declares 0 channels");
    int streams = 1;
    int coupled = channels - 1;
    std::vector<uint8_t> mapping = {0, 1};
    if (family == 0) {
      if (channels > 2) {
        return DataError(absl::StrCat("OpusHead declares ", channels,
                                      " channels with mapping family 0, which allows 1 or 2"));
      }
    } else if (family == 1) {
      if (channels > 8) {
        return DataError(absl::StrCat("OpusHead declares ", channels,
                                      " channels with mapping family 1, which allows 1..8"));
      }
      if (size < kOpusHeadMinBytes + 2 + channels) {
        return DataError(absl::StrCat("OpusHead is ", size, " bytes, too short for its ", channels,
                                      "-channel mapping table"));
      }
      streams = p[19];
      coupled = p[20];
      mapping.assign(p + 21, p + 21 + channels);
      if (streams == 0 || coupled > streams || streams + coupled > 255) {
        return DataError(absl::StrCat("OpusHead declares ", streams, " streams of which ", coupled,
                                      " coupled, which is invalid"));
      }
      for (uint8_t m : mapping) {
        if (m != 255 && m >= streams + coupled) {
          return DataError(absl::StrCat("OpusHead maps a channel to decoded channel ", m,
                                        " of only ", streams + coupled));
        }
      }
    } else {
      return absl::UnimplementedError(absl::StrCat(
          "OGG_OPUS: channel mapping family ", family,
          " is not supported (waav decodes families 0 and 1: mono, stereo, up to 8 channels)"));
    }
    if (format().channels != 0 && format().channels != channels) {
      return DataError(absl::StrCat("the stream's OpusHead says ", channels,
                                    " channels but channels declares ", format().channels,
                                    "; declare ", channels, " or 0"));
    }
    if (format().sample_rate_hz != 0 && header_rate_hz != 0 &&
        static_cast<uint32_t>(format().sample_rate_hz) != header_rate_hz) {
      return DataError(absl::StrCat("the stream's OpusHead says it was captured at ",
                                    header_rate_hz, " Hz but sample_rate_hz declares ",
                                    format().sample_rate_hz, " Hz; declare ", header_rate_hz,
                                    " or 0"));
    }
    int error = OPUS_OK;
    opus_ = opus_multistream_decoder_create(kOpusRateHz, channels, streams, coupled, mapping.data(),
                                            &error);
    if (opus_ == nullptr || error != OPUS_OK) {
      return DataError(
          absl::StrCat("libopus rejects the OpusHead channel layout: ", opus_strerror(error)));
    }
    if (opus_multistream_decoder_ctl(opus_, OPUS_SET_GAIN(gain_q8)) != OPUS_OK) {
      return DataError(absl::StrCat("libopus rejects the OpusHead output gain ", gain_q8));
    }
    pcm_.resize(static_cast<size_t>(kMaxOpusFrameSamples) * channels);
    return SetInputFormat(kOpusRateHz, channels);
  }

  absl::Status ReadAudioPage(const ogg_page& page) {
    // On the last page the granule position gives the end of the signal (RFC 7845 4.5).
    int64_t end = std::numeric_limits<int64_t>::max();
    const bool last = ogg_page_eos(&page) != 0;
    if (last && ogg_page_granulepos(&page) >= 0) end = ogg_page_granulepos(&page);
    if (ogg_stream_pagein(&stream_, const_cast<ogg_page*>(&page)) != 0) {
      return absl::InternalError("OGG_OPUS: libogg refused a page of its own stream");
    }
    while (true) {
      ogg_packet packet;
      const int result = ogg_stream_packetout(&stream_, &packet);
      if (result == 0) break;
      if (result < 0) {
        return DataError(
            absl::StrCat("a gap in the Ogg data before the page at byte ", page_offset_));
      }
      RETURN_IF_ERROR(DecodePacket(packet, end));
    }
    if (last) stage_ = Stage::kEnded;
    return absl::OkStatus();
  }

  absl::Status DecodePacket(const ogg_packet& packet, int64_t end) {
    ++packets_;
    if (packet.bytes <= 0) {
      return DataError(absl::StrCat("Opus packet ", packets_, " (page at byte ", page_offset_,
                                    ") is empty; every Opus packet has at least one byte"));
    }
    const int n =
        opus_multistream_decode_float(opus_, packet.packet, static_cast<opus_int32>(packet.bytes),
                                      pcm_.data(), kMaxOpusFrameSamples, 0);
    if (n < 0) {
      return DataError(absl::StrCat("corrupt Opus packet ", packets_, " (", packet.bytes,
                                    " bytes, page at byte ", page_offset_,
                                    "): ", opus_strerror(n)));
    }
    // Samples [decoded_, decoded_ + n) of the stream; keep those in [pre_skip_, end).
    const int64_t first = std::max<int64_t>(decoded_, pre_skip_);
    const int64_t stop = std::min<int64_t>(decoded_ + n, end);
    const int64_t from = first - decoded_;
    decoded_ += n;
    if (stop <= first) return absl::OkStatus();
    const int channels = input_channels();
    const float scale = 1.0f / static_cast<float>(channels);
    mono_.resize(static_cast<size_t>(stop - first));
    for (size_t i = 0; i < mono_.size(); ++i) {
      const float* frame = pcm_.data() + (static_cast<size_t>(from) + i) * channels;
      float sum = 0;
      for (int c = 0; c < channels; ++c) sum += frame[c];
      mono_[i] = sum * scale;
    }
    return Emit(mono_);
  }

  ogg_sync_state sync_;
  ogg_stream_state stream_;
  bool stream_ready_ = false;      // stream_ is initialised (from the first audio page on)
  OpusMSDecoder* opus_ = nullptr;  // owned
  Stage stage_ = Stage::kHead;
  int serial_ = 0;
  int64_t next_sequence_ = 0;
  int pre_skip_ = 0;
  int64_t decoded_ = 0;      // 48 kHz samples decoded, pre-skip included: the granule clock
  int64_t packets_ = 0;      // audio packets seen, for messages
  int64_t written_ = 0;      // bytes handed to libogg
  int64_t page_offset_ = 0;  // stream offset of the page being read
  std::string magic_seen_;   // the stream's first bytes, up to 4
  std::vector<float> pcm_;   // one decoded packet, interleaved
  std::vector<float> mono_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StreamDecoder>> NewOggOpusDecoder(
    const AudioFormatSpec& format, const StreamDecoderOptions& options) {
  return std::make_unique<OggOpusDecoder>(format, options);
}

}  // namespace waav::audio::internal
