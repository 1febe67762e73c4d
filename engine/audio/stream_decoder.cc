#include "engine/audio/stream_decoder.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/audio/decoder_factories.h"
#include "engine/runtime/status.h"

namespace waav::audio {
namespace {

bool RateInRange(int hz) { return hz >= kMinInputSampleRateHz && hz <= kMaxInputSampleRateHz; }

absl::Status CheckFormat(const AudioFormatSpec& format) {
  const std::string name = AudioEncodingName(format.encoding);
  switch (format.encoding) {
    case AudioEncoding::kUnspecified:
      return absl::InvalidArgumentError("audio encoding is not set (UNSPECIFIED)");
    case AudioEncoding::kLinear16:
    case AudioEncoding::kFloat32:
    case AudioEncoding::kMulaw:
    case AudioEncoding::kAlaw:
    case AudioEncoding::kFlac:
    case AudioEncoding::kOggOpus:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown audio encoding ", name));
  }
  const bool raw = IsRawEncoding(format.encoding);
  if (raw && format.sample_rate_hz == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_rate_hz is required for ", name, " (", kMinInputSampleRateHz, "..",
                     kMaxInputSampleRateHz, " Hz): raw audio carries no header"));
  }
  if (format.sample_rate_hz != 0 && !RateInRange(format.sample_rate_hz)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample_rate_hz ", format.sample_rate_hz, " is outside ", kMinInputSampleRateHz, "..",
        kMaxInputSampleRateHz, " Hz", raw ? "" : " (or 0: take the stream header's rate)"));
  }
  if (format.channels < 0 || format.channels > kMaxInputChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels ", format.channels, " is outside 1..", kMaxInputChannels,
                     raw ? " (0 means 1)" : " (or 0: take the stream header's count)"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const StreamDecoderOptions& options) {
  if (options.output_sample_rate_hz != 0 && !RateInRange(options.output_sample_rate_hz)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_sample_rate_hz ", options.output_sample_rate_hz, " is outside ",
        kMinInputSampleRateHz, "..", kMaxInputSampleRateHz, " Hz (or 0: the input's rate)"));
  }
  if (options.max_buffered_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_buffered_bytes ", options.max_buffered_bytes, " is below 1024"));
  }
  if (!(options.max_feed_seconds > 0) || !std::isfinite(options.max_feed_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_feed_seconds ", options.max_feed_seconds, " must be positive"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string AudioEncodingName(AudioEncoding encoding) {
  switch (encoding) {
    case AudioEncoding::kUnspecified:
      return "UNSPECIFIED";
    case AudioEncoding::kLinear16:
      return "LINEAR16";
    case AudioEncoding::kFloat32:
      return "FLOAT32";
    case AudioEncoding::kMulaw:
      return "MULAW";
    case AudioEncoding::kAlaw:
      return "ALAW";
    case AudioEncoding::kFlac:
      return "FLAC";
    case AudioEncoding::kOggOpus:
      return "OGG_OPUS";
  }
  return absl::StrCat("UNKNOWN(", static_cast<int>(encoding), ")");
}

bool IsRawEncoding(AudioEncoding encoding) {
  return encoding == AudioEncoding::kLinear16 || encoding == AudioEncoding::kFloat32 ||
         encoding == AudioEncoding::kMulaw || encoding == AudioEncoding::kAlaw;
}

absl::StatusOr<std::unique_ptr<StreamDecoder>> StreamDecoder::Create(
    const AudioFormatSpec& format, const StreamDecoderOptions& options) {
  RETURN_IF_ERROR(CheckFormat(format));
  RETURN_IF_ERROR(CheckOptions(options));
  if (format.encoding == AudioEncoding::kFlac) return internal::NewFlacDecoder(format, options);
  if (format.encoding == AudioEncoding::kOggOpus) {
    return internal::NewOggOpusDecoder(format, options);
  }
  return internal::NewRawDecoder(format, options);
}

StreamDecoder::StreamDecoder(const AudioFormatSpec& format, const StreamDecoderOptions& options)
    : format_(format), options_(options) {}

StreamDecoder::~StreamDecoder() = default;

int StreamDecoder::output_sample_rate_hz() const {
  return options_.output_sample_rate_hz != 0 ? options_.output_sample_rate_hz
                                             : input_sample_rate_hz_;
}

absl::Status StreamDecoder::Feed(absl::Span<const uint8_t> bytes, std::vector<float>* out) {
  RETURN_IF_ERROR(status_);
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat(AudioEncodingName(format_.encoding), ": Feed() after Finish()"));
  }
  out_ = out;
  feed_samples_ = 0;
  feed_bytes_ = static_cast<int64_t>(bytes.size());
  absl::Status status = DecodeBytes(bytes);
  bytes_fed_ += static_cast<int64_t>(bytes.size());
  out_ = nullptr;
  return Fail(std::move(status));
}

absl::Status StreamDecoder::Finish(std::vector<float>* out) {
  RETURN_IF_ERROR(status_);
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat(AudioEncodingName(format_.encoding), ": Finish() called twice"));
  }
  finished_ = true;
  out_ = out;
  feed_samples_ = 0;
  feed_bytes_ = 0;
  absl::Status status = DecodeEnd();
  if (status.ok() && resampler_.has_value()) {
    absl::StatusOr<std::vector<float>> tail = resampler_->Flush();
    if (tail.ok()) {
      out->insert(out->end(), tail->begin(), tail->end());
    } else {
      status = tail.status();
    }
  }
  out_ = nullptr;
  return Fail(std::move(status));
}

absl::Status StreamDecoder::SetInputFormat(int sample_rate_hz, int channels) {
  input_sample_rate_hz_ = sample_rate_hz;
  input_channels_ = channels;
  if (options_.output_sample_rate_hz != 0) {
    ASSIGN_OR_RETURN(StreamingResampler resampler,
                     StreamingResampler::Create(sample_rate_hz, options_.output_sample_rate_hz));
    resampler_.emplace(std::move(resampler));
  }
  return absl::OkStatus();
}

absl::Status StreamDecoder::Emit(absl::Span<const float> mono) {
  if (mono.empty()) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(mono.size());
  const double limit = options_.max_feed_seconds * input_sample_rate_hz_;
  if (static_cast<double>(feed_samples_ + n) > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        AudioEncodingName(format_.encoding), ": ", feed_bytes_,
        " bytes of audio decode to more than ", options_.max_feed_seconds,
        " s (the limit for one piece, max_feed_seconds); send the audio in smaller pieces"));
  }
  feed_samples_ += n;
  input_samples_decoded_ += n;
  if (!resampler_.has_value()) {
    out_->insert(out_->end(), mono.begin(), mono.end());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<float> resampled, resampler_->Process(mono));
  out_->insert(out_->end(), resampled.begin(), resampled.end());
  return absl::OkStatus();
}

absl::Status StreamDecoder::DataError(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(AudioEncodingName(format_.encoding), ": ", what));
}

absl::Status StreamDecoder::Fail(absl::Status status) {
  if (!status.ok() && status_.ok()) status_ = status;
  return status;
}

}  // namespace waav::audio
