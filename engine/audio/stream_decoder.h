// Decoding a stream of encoded audio bytes, which arrive in arbitrary pieces, into mono float
// samples at the model's rate (16 kHz), as the server's streaming path needs.
//
// Encodings (see docs/audio.md for how each is decoded):
//   raw:       LINEAR16 (s16le), FLOAT32 (f32le), MULAW and ALAW (G.711): interleaved frames, the
//              rate and channel count come from AudioFormatSpec.
//   container: FLAC (native FLAC stream) and OGG_OPUS (RFC 7845): the rate and channel count come
//              from the stream header; a nonzero declared value must agree with it.
// Every channel count is mixed down to mono by averaging; every rate is resampled (libsoxr, see
// resampler.h) to the output rate.
//
// Errors. Bad configuration is InvalidArgument from Create(). Bytes that do not decode (corrupt
// or truncated headers, frames, pages or packets, non-finite FLOAT32 samples, a header that
// contradicts the declared format) are InvalidArgument; a valid stream that uses a feature waav
// does not decode (an Opus channel mapping family other than 0 or 1) is Unimplemented. Messages
// name the encoding, what is wrong and where (byte offset in the stream where known). Once a call
// fails the decoder stays failed: every later call returns the same status.
//
// Memory is bounded: a decoder holds at most `max_buffered_bytes` of input it could not decode
// yet, and one Feed() decodes at most `max_feed_seconds` of audio (compressed formats can expand
// a few bytes into seconds of silence; the limit keeps a small message from becoming gigabytes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/audio/resampler.h"

namespace waav::audio {

// Mirrors waav.v1.AudioEncoding (engine/ does not depend on the proto; the server maps one to the
// other). Values other than these are rejected by Create().
enum class AudioEncoding {
  kUnspecified = 0,
  kLinear16 = 1,  // signed 16-bit little-endian PCM
  kFloat32 = 2,   // IEEE 754 binary32 little-endian, nominal full scale [-1, 1]; must be finite
  kMulaw = 3,     // G.711 mu-law, 8 bits per sample
  kAlaw = 4,      // G.711 A-law, 8 bits per sample
  kFlac = 5,      // native FLAC stream: "fLaC", STREAMINFO, other metadata, frames
  kOggOpus = 6,   // Opus in Ogg pages (RFC 7845): OpusHead page, OpusTags page(s), audio pages
};

// "LINEAR16", "FLOAT32", ... as in the proto; "UNKNOWN(n)" for other values.
std::string AudioEncodingName(AudioEncoding encoding);

// True for the encodings whose rate and channel count are declared by the client.
bool IsRawEncoding(AudioEncoding encoding);

// Limits shared with the public API (proto/waav/v1/audio.proto).
inline constexpr int kMinInputSampleRateHz = 8000;
inline constexpr int kMaxInputSampleRateHz = 192000;
inline constexpr int kMaxInputChannels = 8;

// What the bytes are. Declared by the client.
struct AudioFormatSpec {
  AudioEncoding encoding = AudioEncoding::kUnspecified;
  // Samples per second per channel. Raw encodings: required, kMinInputSampleRateHz ..
  // kMaxInputSampleRateHz. FLAC: 0, or STREAMINFO's rate. OGG_OPUS: 0, or OpusHead's
  // "input sample rate" (the capture rate; Opus itself always decodes at 48 kHz). Default: 0.
  int sample_rate_hz = 0;
  // Interleaved channels per frame. Raw: 0 (means 1) .. kMaxInputChannels. Containers: 0, or the
  // header's count. Default: 0.
  int channels = 0;
};

struct StreamDecoderOptions {
  // Rate of the samples Feed() and Finish() return. 0 returns the input's own rate without
  // resampling (tests compare lossless decoders bit for bit this way). Otherwise
  // kMinInputSampleRateHz .. kMaxInputSampleRateHz. Default: 16000, what Whisper expects.
  int output_sample_rate_hz = kWhisperSampleRateHz;
  // Most input not yet decodable that a decoder holds: a partial FLAC frame, a partial Ogg page
  // or an Opus packet continued over pages. Legitimate streams need far less (a FLAC frame is at
  // most ~2.1 MB even at 65535 samples x 8 channels x 32 bits; an Ogg page at most 65,307 bytes).
  // Default: 8 MiB.
  int64_t max_buffered_bytes = int64_t{8} << 20;
  // Most audio one Feed() call may decode, in seconds of input. Callers that hold a large input
  // (a whole file) should feed it in pieces of a few hundred kilobytes. Default: 600.
  double max_feed_seconds = 600;
};

// Decodes one audio stream. Create one per stream, Feed() the bytes in order as they arrive,
// then Finish() once. Not thread-safe; one thread at a time per decoder.
class StreamDecoder {
 public:
  // InvalidArgument for an unset or unknown encoding, or a rate, channel count or option outside
  // the limits above.
  static absl::StatusOr<std::unique_ptr<StreamDecoder>> Create(
      const AudioFormatSpec& format, const StreamDecoderOptions& options = {});

  StreamDecoder(const StreamDecoder&) = delete;
  StreamDecoder& operator=(const StreamDecoder&) = delete;
  virtual ~StreamDecoder();

  // Decodes `bytes`, the next piece of the stream (any size, empty included; a piece may end in
  // the middle of a sample, frame, page or packet), and appends the mono samples at the output
  // rate that are ready to `out`. Some output is held back until later bytes arrive (partial
  // frames; the resampler's filter delay). On error `out` may have received part of this piece's
  // output. FailedPrecondition after Finish().
  absl::Status Feed(absl::Span<const uint8_t> bytes, std::vector<float>* out);

  // Ends the stream: appends the held-back tail to `out`. Input that ends inside a raw frame, a
  // FLAC frame or an Ogg page is dropped (counted in trailing_bytes_dropped()), as the API
  // specifies for raw audio: a client that stops mid-frame loses that frame, not the stream. A
  // container stream that ends before its header is complete is InvalidArgument (an empty stream
  // is not an error). FailedPrecondition if called twice.
  absl::Status Finish(std::vector<float>* out);

  const AudioFormatSpec& format() const { return format_; }

  // The input's time base, in which the server reports offsets: the declared rate for raw
  // encodings, STREAMINFO's rate for FLAC, 48000 for OGG_OPUS (Opus decodes at 48 kHz and Ogg
  // granule positions count 48 kHz samples). 0 until the header is read.
  int input_sample_rate_hz() const { return input_sample_rate_hz_; }
  // Channels per input frame; 0 until the header is read.
  int input_channels() const { return input_channels_; }
  // Rate of the samples returned: the option, or input_sample_rate_hz() when the option is 0.
  int output_sample_rate_hz() const;

  // Input frames (samples per channel, in the input's time base) decoded so far. Opus: after
  // removing OpusHead's pre-skip and the end trim of the last page, so that it counts the
  // samples of the original signal. Offsets: ms = input_samples_decoded() * 1000 /
  // input_sample_rate_hz(). After Finish(), the output holds about input_samples_decoded() *
  // output rate / input rate samples.
  int64_t input_samples_decoded() const { return input_samples_decoded_; }
  // Bytes passed to Feed() so far.
  int64_t bytes_fed() const { return bytes_fed_; }
  // Bytes of an incomplete final frame or page discarded by Finish().
  int64_t trailing_bytes_dropped() const { return trailing_bytes_dropped_; }

 protected:
  StreamDecoder(const AudioFormatSpec& format, const StreamDecoderOptions& options);

  // Implemented by each encoding: decode `bytes` and pass mono samples at the input rate to
  // Emit() as they become available.
  virtual absl::Status DecodeBytes(absl::Span<const uint8_t> bytes) = 0;
  // The stream has ended: emit what remains, record dropped bytes.
  virtual absl::Status DecodeEnd() = 0;

  // Called once, as soon as the input's rate and channel count are known (raw decoders from
  // their constructor's caller, containers when their header is parsed).
  absl::Status SetInputFormat(int sample_rate_hz, int channels);
  // Hands decoded mono samples at the input rate on: counts them, checks the per-Feed limit,
  // resamples and appends to the caller's output.
  absl::Status Emit(absl::Span<const float> mono);
  void AddTrailingBytesDropped(int64_t n) { trailing_bytes_dropped_ += n; }

  const StreamDecoderOptions& options() const { return options_; }
  // An InvalidArgument status whose message starts with the encoding's name.
  absl::Status DataError(absl::string_view what) const;

 private:
  absl::Status Fail(absl::Status status);

  AudioFormatSpec format_;
  StreamDecoderOptions options_;
  int input_sample_rate_hz_ = 0;
  int input_channels_ = 0;
  std::optional<StreamingResampler> resampler_;  // set once the input rate is known, if resampling
  std::vector<float>* out_ = nullptr;            // the caller's output during Feed()/Finish()
  int64_t feed_samples_ = 0;                     // input frames emitted by the current call
  int64_t feed_bytes_ = 0;                       // size of the current Feed()'s piece
  int64_t input_samples_decoded_ = 0;
  int64_t bytes_fed_ = 0;
  int64_t trailing_bytes_dropped_ = 0;
  bool finished_ = false;
  absl::Status status_;  // first error; every later call returns it
};

}  // namespace waav::audio
