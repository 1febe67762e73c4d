// Reading RIFF/WAVE audio into mono float samples.
//
// Supported encodings: integer PCM of 8 (unsigned), 16, 24 and 32 bits, IEEE float of 32 and 64
// bits, each either as a plain format tag or inside WAVE_FORMAT_EXTENSIBLE. Any channel count is
// mixed down to mono by averaging; the sample rate is kept as found (see resampler.h to convert).
// The reader never reads outside the bytes it is given; every malformed input yields an
// InvalidArgument status whose message starts with the file name and says what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace waav::audio {

// Mono audio. Samples are nominally in [-1, 1]; float files may exceed that range and are not
// clipped. Non-finite samples are rejected while parsing, so every sample here is finite.
struct Audio {
  std::vector<float> samples;
  int sample_rate_hz = 0;
};

// Files larger than this are refused before they are read (about 3.4 hours of 16-bit stereo at
// 44.1 kHz); a request this large is a mistake or an attack, not speech to transcribe.
inline constexpr int64_t kMaxWavFileBytes = int64_t{2} << 30;  // 2 GiB
// Limits on header fields. Beyond these a header is corrupt rather than unusual.
inline constexpr int kMaxWavChannels = 1024;
inline constexpr int kMinWavSampleRateHz = 1000;
inline constexpr int kMaxWavSampleRateHz = 1'000'000;

// Parses a RIFF/WAVE (or RF64) file held in memory. `name` is used in error messages only.
//
// Lenient where streaming writers are sloppy: the RIFF size is ignored; a data chunk size of 0 or
// 0xFFFFFFFF means "the rest of the file"; a data size beyond the end of the file is clamped to
// what is there; a truncated final sample frame is dropped. Unknown chunks (LIST, fact, ...) are
// skipped, honouring the pad byte after odd-sized chunks. A file with no complete sample frame is
// an error ("contains no audio").
absl::StatusOr<Audio> ParseWav(absl::Span<const uint8_t> bytes, const std::string& name);

// Reads the file at `path`, then ParseWav. NotFound for a missing path or a directory,
// InvalidArgument for files over kMaxWavFileBytes.
absl::StatusOr<Audio> ReadWavFile(const std::string& path);

}  // namespace waav::audio
