// FLAC: our own parser reads the metadata blocks (so that a large PICTURE or PADDING block is
// skipped as it streams past instead of being buffered), then libFLAC's stream decoder decodes
// the frames, reading through callbacks from an internal byte queue.
//
// libFLAC pulls bytes and cannot be told "no more bytes yet", so the read callback aborts the
// decoder when the queue runs dry mid-frame. Every decoded frame commits its end position
// (FLAC__stream_decoder_get_decode_position); after an abort the decoder is flushed and the
// queue rewound to the last commit, so the partial frame is decoded again from its first byte
// once the rest of it has arrived. The queue thus holds at most one partial frame plus the piece
// being decoded.
//
// libFLAC sees a synthesised header, "fLaC" and the client's STREAMINFO marked as the last
// metadata block with the total sample count and MD5 cleared (they are not needed to decode, and
// the count would make libFLAC stop at the wrong place after a flush). Byte positions in libFLAC's
// view are therefore offset from the client's stream; error messages give the client's offsets.

#include <FLAC/stream_decoder.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/audio/decoder_factories.h"
#include "engine/runtime/status.h"

namespace waav::audio::internal {
namespace {

constexpr std::array<uint8_t, 4> kMarker = {'f', 'L', 'a', 'C'};
constexpr int kStreamInfoBytes = 34;
constexpr int kStreamInfoType = 0;
constexpr int kInvalidBlockType = 127;
// Size of the synthesised header libFLAC reads: marker, block header, STREAMINFO.
constexpr int64_t kSyntheticHeaderBytes = 4 + 4 + kStreamInfoBytes;
// Input handed to libFLAC per decoding round; bounds the queue beyond the partial frame.
constexpr size_t kPieceBytes = 64 * 1024;

absl::string_view FlacErrorText(FLAC__StreamDecoderErrorStatus status) {
  switch (status) {
    case FLAC__STREAM_DECODER_ERROR_STATUS_LOST_SYNC:
      return "bytes that are not a FLAC frame (lost frame sync)";
    case FLAC__STREAM_DECODER_ERROR_STATUS_BAD_HEADER:
      return "a corrupt frame header";
    case FLAC__STREAM_DECODER_ERROR_STATUS_FRAME_CRC_MISMATCH:
      return "a frame whose CRC does not match its contents";
    case FLAC__STREAM_DECODER_ERROR_STATUS_UNPARSEABLE_STREAM:
      return "a frame libFLAC cannot parse";
    default:
      return "corrupt data";
  }
}

class FlacDecoder final : public StreamDecoder {
 public:
  FlacDecoder(const AudioFormatSpec& format, const StreamDecoderOptions& options)
      : StreamDecoder(format, options) {}

  ~FlacDecoder() override {
    if (flac_ != nullptr) FLAC__stream_decoder_delete(flac_);
  }

  absl::Status Init() {
    flac_ = FLAC__stream_decoder_new();
    if (flac_ == nullptr) return absl::ResourceExhaustedError("FLAC: cannot allocate a decoder");
    // MD5 needs the whole stream; a flush after an abort would switch it off anyway.
    FLAC__stream_decoder_set_md5_checking(flac_, false);
    return absl::OkStatus();
  }

 protected:
  absl::Status DecodeBytes(absl::Span<const uint8_t> bytes) override {
    while (!bytes.empty() && stage_ != Stage::kFrames) {
      ASSIGN_OR_RETURN(size_t used, ParseHeader(bytes));
      bytes.remove_prefix(used);
    }
    while (!bytes.empty()) {
      const size_t piece = std::min(bytes.size(), kPieceBytes);
      Append(bytes.subspan(0, piece));
      bytes.remove_prefix(piece);
      RETURN_IF_ERROR(DecodeFrames());
      const int64_t held = static_cast<int64_t>(queue_.size() - head_);
      if (held > options().max_buffered_bytes) {
        return DataError(absl::StrCat(
            "a frame starting at byte ", StreamOffset(queue_pos_), " is still incomplete after ",
            held, " bytes (more than max_buffered_bytes = ", options().max_buffered_bytes,
            "); the stream is corrupt"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status DecodeEnd() override {
    if (stage_ != Stage::kFrames) {
      if (bytes_fed() == 0) return absl::OkStatus();
      return DataError(absl::StrCat(
          "the stream ended after ", bytes_fed(), " bytes, inside its header (",
          stage_ == Stage::kMarker || !have_stream_info_ ? "before STREAMINFO was complete"
                                                         : "in a metadata block after STREAMINFO",
          "); no audio frames"));
    }
    // Every complete frame was decoded as its last byte arrived; what is left is the start of a
    // frame that never ended. (Not handed to libFLAC as end of stream: libFLAC 1.4 reports a
    // frame cut short as lost sync.)
    AddTrailingBytesDropped(static_cast<int64_t>(queue_.size() - head_));
    return absl::OkStatus();
  }

 private:
  enum class Stage { kMarker, kBlockHeader, kStreamInfo, kSkipBlock, kFrames };

  // Consumes a prefix of `bytes` belonging to the header; returns its length.
  absl::StatusOr<size_t> ParseHeader(absl::Span<const uint8_t> bytes) {
    switch (stage_) {
      case Stage::kMarker: {
        const size_t used = Gather(bytes, kMarker.size());
        if (!std::equal(header_.begin(), header_.end(), kMarker.begin())) {
          return DataError(absl::StrCat(
              "the stream does not start with the FLAC marker \"fLaC\" (it starts with \"",
              absl::CHexEscape(std::string(header_.begin(), header_.end())), "\")"));
        }
        if (header_.size() == kMarker.size()) NextStage(Stage::kBlockHeader);
        return used;
      }
      case Stage::kBlockHeader: {
        const size_t used = Gather(bytes, 4);
        if (header_.size() < 4) return used;
        last_block_ = (header_[0] & 0x80) != 0;
        const int type = header_[0] & 0x7F;
        block_bytes_left_ = (int64_t{header_[1]} << 16) | (header_[2] << 8) | header_[3];
        const int64_t at = header_offset_ - 4;
        if (type == kInvalidBlockType) {
          return DataError(
              absl::StrCat("metadata block at byte ", at, " has the invalid type 127"));
        }
        if (!have_stream_info_ && type != kStreamInfoType) {
          return DataError(absl::StrCat("the first metadata block (byte ", at, ") has type ", type,
                                        ", not STREAMINFO (0)"));
        }
        if (type == kStreamInfoType) {
          if (have_stream_info_) {
            return DataError(absl::StrCat("a second STREAMINFO block at byte ", at));
          }
          if (block_bytes_left_ != kStreamInfoBytes) {
            return DataError(absl::StrCat("STREAMINFO at byte ", at, " is ", block_bytes_left_,
                                          " bytes long, not ", kStreamInfoBytes));
          }
          NextStage(Stage::kStreamInfo);
        } else {
          NextStage(Stage::kSkipBlock);
          if (block_bytes_left_ == 0) EndBlock();
        }
        return used;
      }
      case Stage::kStreamInfo: {
        const size_t used = Gather(bytes, kStreamInfoBytes);
        if (header_.size() == kStreamInfoBytes) {
          RETURN_IF_ERROR(StartDecoding());
          EndBlock();
        }
        return used;
      }
      case Stage::kSkipBlock: {
        const size_t used = static_cast<size_t>(
            std::min<int64_t>(block_bytes_left_, static_cast<int64_t>(bytes.size())));
        block_bytes_left_ -= static_cast<int64_t>(used);
        header_offset_ += static_cast<int64_t>(used);
        if (block_bytes_left_ == 0) EndBlock();
        return used;
      }
      case Stage::kFrames:
        break;
    }
    return size_t{0};
  }

  // Appends bytes to header_ until it holds `want`; returns how many it took.
  size_t Gather(absl::Span<const uint8_t> bytes, size_t want) {
    const size_t take = std::min(want - header_.size(), bytes.size());
    header_.insert(header_.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(take));
    header_offset_ += static_cast<int64_t>(take);
    return take;
  }

  void NextStage(Stage stage) {
    stage_ = stage;
    header_.clear();
  }

  void EndBlock() {
    if (last_block_) {
      frames_offset_ = header_offset_;
      NextStage(Stage::kFrames);
    } else {
      NextStage(Stage::kBlockHeader);
    }
  }

  // header_ holds STREAMINFO: check it against the declared format and start libFLAC on the
  // synthesised header.
  absl::Status StartDecoding() {
    const uint8_t* s = header_.data();
    const int rate = (s[10] << 12) | (s[11] << 4) | (s[12] >> 4);
    const int channels = ((s[12] >> 1) & 7) + 1;
    bits_per_sample_ = (((s[12] & 1) << 4) | (s[13] >> 4)) + 1;
    if (rate < kMinInputSampleRateHz || rate > kMaxInputSampleRateHz) {
      return DataError(absl::StrCat("STREAMINFO sample rate ", rate, " Hz is outside ",
                                    kMinInputSampleRateHz, "..", kMaxInputSampleRateHz, " Hz"));
    }
    if (bits_per_sample_ < 4) {
      return DataError(absl::StrCat("STREAMINFO bits per sample ", bits_per_sample_,
                                    " is invalid (FLAC allows 4..32)"));
    }
    if (format().sample_rate_hz != 0 && format().sample_rate_hz != rate) {
      return DataError(absl::StrCat("the stream's STREAMINFO says ", rate,
                                    " Hz but sample_rate_hz declares ", format().sample_rate_hz,
                                    " Hz; declare ", rate, " or 0"));
    }
    if (format().channels != 0 && format().channels != channels) {
      return DataError(absl::StrCat("the stream's STREAMINFO says ", channels,
                                    " channels but channels declares ", format().channels,
                                    "; declare ", channels, " or 0"));
    }
    have_stream_info_ = true;
    RETURN_IF_ERROR(SetInputFormat(rate, channels));

    std::vector<uint8_t> synthetic(kMarker.begin(), kMarker.end());
    synthetic.insert(synthetic.end(), {0x80 | kStreamInfoType, 0, 0, kStreamInfoBytes});
    synthetic.insert(synthetic.end(), header_.begin(), header_.end());
    // Total samples: the low 4 bits of byte 13 and bytes 14..17; then the MD5 (18..33).
    synthetic[8 + 13] &= 0xF0;
    std::fill(synthetic.begin() + 8 + 14, synthetic.end(), 0);
    Append(synthetic);

    const FLAC__StreamDecoderInitStatus init = FLAC__stream_decoder_init_stream(
        flac_, &ReadCallback, /*seek_callback=*/nullptr, &TellCallback,
        /*length_callback=*/nullptr, /*eof_callback=*/nullptr, &WriteCallback,
        /*metadata_callback=*/nullptr, &ErrorCallback, this);
    if (init != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
      return absl::InternalError(
          absl::StrCat("FLAC: libFLAC init failed: ", FLAC__StreamDecoderInitStatusString[init]));
    }
    if (!FLAC__stream_decoder_process_until_end_of_metadata(flac_) || !error_.ok() ||
        FLAC__stream_decoder_get_state(flac_) != FLAC__STREAM_DECODER_SEARCH_FOR_FRAME_SYNC) {
      RETURN_IF_ERROR(error_);
      return DataError(
          absl::StrCat("libFLAC rejects the STREAMINFO block (",
                       FLAC__StreamDecoderStateString[FLAC__stream_decoder_get_state(flac_)], ")"));
    }
    return Commit();
  }

  void Append(absl::Span<const uint8_t> bytes) {
    if (head_ > 0 && head_ >= queue_.size() / 2) {
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(head_));
      head_ = 0;
    }
    queue_.insert(queue_.end(), bytes.begin(), bytes.end());
  }

  // Decodes every frame complete in the queue.
  absl::Status DecodeFrames() {
    while (head_ < queue_.size()) {
      frame_written_ = false;
      FLAC__stream_decoder_process_single(flac_);
      RETURN_IF_ERROR(error_);
      const FLAC__StreamDecoderState state = FLAC__stream_decoder_get_state(flac_);
      if (frame_written_) {
        RETURN_IF_ERROR(Commit());
        continue;
      }
      if (state != FLAC__STREAM_DECODER_ABORTED) {
        return DataError(absl::StrCat("libFLAC stopped near byte ", StreamOffset(queue_pos_),
                                      " in state ", FLAC__StreamDecoderStateString[state]));
      }
      // Ran out of bytes inside a frame: forget the partial read, retry when more arrive.
      if (!FLAC__stream_decoder_flush(flac_)) {
        return absl::ResourceExhaustedError("FLAC: libFLAC cannot reset its input buffer");
      }
      delivered_ = 0;
      break;
    }
    return absl::OkStatus();
  }

  // Drops the bytes libFLAC has fully decoded from the queue.
  absl::Status Commit() {
    FLAC__uint64 position = 0;
    if (!FLAC__stream_decoder_get_decode_position(flac_, &position) ||
        static_cast<int64_t>(position) < queue_pos_ ||
        static_cast<int64_t>(position) > queue_pos_ + delivered_) {
      return absl::InternalError("FLAC: libFLAC reports an impossible decode position");
    }
    const int64_t consumed = static_cast<int64_t>(position) - queue_pos_;
    head_ += static_cast<size_t>(consumed);
    queue_pos_ += consumed;
    delivered_ -= consumed;
    return absl::OkStatus();
  }

  // Offset in the client's stream of a position in libFLAC's view.
  int64_t StreamOffset(int64_t flac_position) const {
    return frames_offset_ + flac_position - kSyntheticHeaderBytes;
  }

  static FLAC__StreamDecoderReadStatus ReadCallback(const FLAC__StreamDecoder*, FLAC__byte buffer[],
                                                    size_t* bytes, void* client) {
    auto* self = static_cast<FlacDecoder*>(client);
    if (!self->error_.ok()) {
      *bytes = 0;
      return FLAC__STREAM_DECODER_READ_STATUS_ABORT;
    }
    const size_t available = self->queue_.size() - self->head_ - self->delivered_;
    if (available == 0) {
      *bytes = 0;
      return FLAC__STREAM_DECODER_READ_STATUS_ABORT;
    }
    const size_t n = std::min(*bytes, available);
    std::memcpy(buffer, self->queue_.data() + self->head_ + self->delivered_, n);
    self->delivered_ += static_cast<int64_t>(n);
    *bytes = n;
    return FLAC__STREAM_DECODER_READ_STATUS_CONTINUE;
  }

  static FLAC__StreamDecoderTellStatus TellCallback(const FLAC__StreamDecoder*,
                                                    FLAC__uint64* offset, void* client) {
    auto* self = static_cast<FlacDecoder*>(client);
    *offset = static_cast<FLAC__uint64>(self->queue_pos_ + self->delivered_);
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
  }

  static FLAC__StreamDecoderWriteStatus WriteCallback(const FLAC__StreamDecoder*,
                                                      const FLAC__Frame* frame,
                                                      const FLAC__int32* const buffer[],
                                                      void* client) {
    auto* self = static_cast<FlacDecoder*>(client);
    if (!self->error_.ok()) return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    self->error_ = self->WriteFrame(*frame, buffer);
    self->frame_written_ = self->error_.ok();
    return self->error_.ok() ? FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE
                             : FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
  }

  absl::Status WriteFrame(const FLAC__Frame& frame, const FLAC__int32* const buffer[]) {
    const FLAC__FrameHeader& h = frame.header;
    if (static_cast<int>(h.sample_rate) != input_sample_rate_hz() ||
        static_cast<int>(h.channels) != input_channels() ||
        static_cast<int>(h.bits_per_sample) != bits_per_sample_) {
      return DataError(absl::StrCat(
          "the frame at byte ", StreamOffset(queue_pos_), " is ", h.sample_rate, " Hz, ",
          h.channels, " channels, ", h.bits_per_sample, " bits but STREAMINFO says ",
          input_sample_rate_hz(), " Hz, ", input_channels(), " channels, ", bits_per_sample_,
          " bits; streams that change format are not supported"));
    }
    // Sum the channels exactly, then scale once: mono 16-bit decodes to exactly sample / 32768.
    const double scale =
        1.0 / (static_cast<double>(int64_t{1} << (bits_per_sample_ - 1)) * h.channels);
    mono_.resize(h.blocksize);
    for (uint32_t i = 0; i < h.blocksize; ++i) {
      int64_t sum = 0;
      for (uint32_t c = 0; c < h.channels; ++c) sum += buffer[c][i];
      mono_[i] = static_cast<float>(static_cast<double>(sum) * scale);
    }
    return Emit(mono_);
  }

  static void ErrorCallback(const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus status,
                            void* client) {
    auto* self = static_cast<FlacDecoder*>(client);
    if (!self->error_.ok()) return;
    self->error_ = self->DataError(
        absl::StrCat("corrupt stream: ", FlacErrorText(status), " near byte ",
                     self->StreamOffset(self->queue_pos_ + self->delivered_), " (after ",
                     self->input_samples_decoded(), " decoded samples)"));
  }

  FLAC__StreamDecoder* flac_ = nullptr;  // owned

  // Header parsing.
  Stage stage_ = Stage::kMarker;
  std::vector<uint8_t> header_;  // the part of the marker, block header or STREAMINFO seen so far
  int64_t header_offset_ = 0;    // client stream offset of the next header byte
  int64_t block_bytes_left_ = 0;
  bool last_block_ = false;
  bool have_stream_info_ = false;
  int bits_per_sample_ = 0;
  int64_t frames_offset_ = 0;  // client stream offset of the first frame

  // Frame decoding. queue_[head_..] holds the bytes from libFLAC position queue_pos_ on (the end
  // of the last decoded frame); the first delivered_ of them have been handed to libFLAC.
  std::vector<uint8_t> queue_;
  size_t head_ = 0;
  int64_t queue_pos_ = 0;
  int64_t delivered_ = 0;
  bool frame_written_ = false;
  absl::Status error_;  // set by the callbacks
  std::vector<float> mono_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StreamDecoder>> NewFlacDecoder(const AudioFormatSpec& format,
                                                              const StreamDecoderOptions& options) {
  auto decoder = std::make_unique<FlacDecoder>(format, options);
  RETURN_IF_ERROR(decoder->Init());
  return decoder;
}

}  // namespace waav::audio::internal
