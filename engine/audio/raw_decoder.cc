// Raw (headerless) encodings: LINEAR16, FLOAT32, MULAW, ALAW. Frames are interleaved; a frame
// split between two pieces waits in `pending_` (at most one frame, 32 bytes) for the rest.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/decoder_factories.h"
#include "engine/audio/g711.h"
#include "engine/runtime/status.h"

namespace waav::audio::internal {
namespace {

// Frames converted per Emit(): keeps the scratch buffer small whatever the piece size.
constexpr size_t kBlockFrames = 4096;
constexpr int kMaxFrameBytes = 4 * kMaxInputChannels;

int BytesPerSample(AudioEncoding encoding) {
  switch (encoding) {
    case AudioEncoding::kLinear16:
      return 2;
    case AudioEncoding::kFloat32:
      return 4;
    default:
      return 1;  // G.711
  }
}

class RawDecoder final : public StreamDecoder {
 public:
  RawDecoder(const AudioFormatSpec& format, const StreamDecoderOptions& options)
      : StreamDecoder(format, options),
        channels_(std::max(1, format.channels)),
        frame_bytes_(channels_ * BytesPerSample(format.encoding)) {
    mono_.reserve(kBlockFrames);
  }

  absl::Status Init() { return SetInputFormat(format().sample_rate_hz, channels_); }

 protected:
  absl::Status DecodeBytes(absl::Span<const uint8_t> bytes) override {
    if (pending_size_ > 0) {
      const size_t take = std::min<size_t>(frame_bytes_ - pending_size_, bytes.size());
      std::memcpy(pending_.data() + pending_size_, bytes.data(), take);
      pending_size_ += static_cast<int>(take);
      bytes.remove_prefix(take);
      if (pending_size_ < frame_bytes_) return absl::OkStatus();
      pending_size_ = 0;
      RETURN_IF_ERROR(DecodeFrames(absl::MakeConstSpan(pending_.data(), frame_bytes_)));
    }
    const size_t whole = bytes.size() / frame_bytes_ * frame_bytes_;
    RETURN_IF_ERROR(DecodeFrames(bytes.subspan(0, whole)));
    const size_t rest = bytes.size() - whole;
    std::memcpy(pending_.data(), bytes.data() + whole, rest);
    pending_size_ = static_cast<int>(rest);
    return absl::OkStatus();
  }

  absl::Status DecodeEnd() override {
    AddTrailingBytesDropped(pending_size_);
    pending_size_ = 0;
    return absl::OkStatus();
  }

 private:
  // `bytes` holds whole frames.
  absl::Status DecodeFrames(absl::Span<const uint8_t> bytes) {
    while (!bytes.empty()) {
      const size_t frames = std::min(kBlockFrames, bytes.size() / frame_bytes_);
      mono_.clear();
      const uint8_t* p = bytes.data();
      for (size_t f = 0; f < frames; ++f, p += frame_bytes_) {
        ASSIGN_OR_RETURN(float sample, MixFrame(p));
        mono_.push_back(sample);
        ++frames_decoded_;
      }
      RETURN_IF_ERROR(Emit(mono_));
      bytes.remove_prefix(frames * frame_bytes_);
    }
    return absl::OkStatus();
  }

  // The average of one frame's channels. Integer samples are summed exactly and scaled once, so
  // a mono stream decodes to exactly sample / 32768.
  absl::StatusOr<float> MixFrame(const uint8_t* p) const {
    const double int_scale = 1.0 / (32768.0 * channels_);
    switch (format().encoding) {
      case AudioEncoding::kLinear16: {
        int32_t sum = 0;
        for (int c = 0; c < channels_; ++c, p += 2) {
          sum += static_cast<int16_t>(static_cast<uint16_t>(p[0] | (p[1] << 8)));
        }
        return static_cast<float>(sum * int_scale);
      }
      case AudioEncoding::kMulaw:
      case AudioEncoding::kAlaw: {
        const bool mulaw = format().encoding == AudioEncoding::kMulaw;
        int32_t sum = 0;
        for (int c = 0; c < channels_; ++c) {
          sum += mulaw ? MulawToLinear16(p[c]) : AlawToLinear16(p[c]);
        }
        return static_cast<float>(sum * int_scale);
      }
      default: {  // kFloat32
        double sum = 0;
        for (int c = 0; c < channels_; ++c, p += 4) {
          const uint32_t bits = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                                (static_cast<uint32_t>(p[2]) << 16) |
                                (static_cast<uint32_t>(p[3]) << 24);
          const float v = std::bit_cast<float>(bits);
          if (!std::isfinite(v)) return NonFinite(v, c);
          sum += v;
        }
        return static_cast<float>(sum / channels_);
      }
    }
  }

  absl::Status NonFinite(float v, int channel) const {
    const int64_t offset = frames_decoded_ * frame_bytes_ + channel * 4;
    return DataError(absl::StrCat("sample ", frames_decoded_, " of channel ", channel,
                                  " (byte offset ", offset, ") is ", std::isnan(v) ? "NaN" : "",
                                  std::isinf(v) ? (v > 0 ? "+infinity" : "-infinity") : "",
                                  "; samples must be finite"));
  }

  const int channels_;
  const int frame_bytes_;
  std::array<uint8_t, kMaxFrameBytes> pending_{};
  int pending_size_ = 0;
  int64_t frames_decoded_ = 0;
  std::vector<float> mono_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StreamDecoder>> NewRawDecoder(const AudioFormatSpec& format,
                                                             const StreamDecoderOptions& options) {
  auto decoder = std::make_unique<RawDecoder>(format, options);
  RETURN_IF_ERROR(decoder->Init());
  return decoder;
}

}  // namespace waav::audio::internal
