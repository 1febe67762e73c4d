#include "engine/audio/wav_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "engine/runtime/status.h"

namespace waav::audio {
namespace {

constexpr char kSupported[] = "supported: PCM 8/16/24/32-bit, float 32/64-bit";
constexpr uint16_t kFormatPcm = 0x0001;
constexpr uint16_t kFormatFloat = 0x0003;
constexpr uint16_t kFormatExtensible = 0xFFFE;
// Sizes of the fmt chunk body: the common part, and with the WAVE_FORMAT_EXTENSIBLE extension.
constexpr size_t kFmtBytes = 16;
constexpr size_t kFmtExtensibleBytes = 40;
// Bytes 2..15 of every KSDATAFORMAT_SUBTYPE_* GUID derived from a plain format tag; bytes 0..1
// hold the tag itself (little-endian).
constexpr uint8_t kSubformatGuidTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                            0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
// A 32-bit chunk size with this value (or 0) is what streaming writers leave when they cannot
// seek back to patch the header; RF64 files use it to defer to the ds64 chunk.
constexpr uint32_t kUnknownSize = 0xFFFFFFFF;

uint16_t ReadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t ReadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t ReadU64(const uint8_t* p) {
  return static_cast<uint64_t>(ReadU32(p)) | (static_cast<uint64_t>(ReadU32(p + 4)) << 32);
}
bool IdIs(const uint8_t* p, const char (&id)[5]) { return std::memcmp(p, id, 4) == 0; }

absl::Status Invalid(const std::string& name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, " ", what));
}

const char* FormatTagName(uint16_t tag) {
  switch (tag) {
    case 0x0002:
      return "Microsoft ADPCM";
    case 0x0006:
      return "A-law";
    case 0x0007:
      return "mu-law";
    case 0x0011:
      return "IMA ADPCM";
    case 0x0031:
      return "GSM 6.10";
    case 0x0050:
      return "MPEG";
    case 0x0055:
      return "MPEG";  // MPEG-1 Layer III (MP3)
    case 0x00FF:
      return "AAC";
    case 0x2000:
      return "AC-3";
    case 0xF1AC:
      return "FLAC";
    default:
      return "unknown";
  }
}

enum class Encoding { kPcm, kFloat };

struct Format {
  Encoding encoding = Encoding::kPcm;
  int channels = 0;
  int sample_rate_hz = 0;
  int bits_per_sample = 0;  // container size: 8, 16, 24, 32 or 64
  int block_align = 0;      // bytes per sample frame (all channels)
};

absl::StatusOr<Format> ParseFmt(absl::Span<const uint8_t> body, const std::string& name) {
  if (body.size() < kFmtBytes) {
    return Invalid(name, absl::StrCat("has a truncated fmt chunk (", body.size(),
                                      " bytes, need at least ", kFmtBytes, ")"));
  }
  const uint8_t* p = body.data();
  uint16_t tag = ReadU16(p);
  Format format;
  format.channels = ReadU16(p + 2);
  const uint32_t sample_rate_hz = ReadU32(p + 4);
  format.block_align = ReadU16(p + 12);
  format.bits_per_sample = ReadU16(p + 14);

  if (tag == kFormatExtensible) {
    if (body.size() < kFmtExtensibleBytes) {
      return Invalid(name, absl::StrCat("has a WAVE_FORMAT_EXTENSIBLE fmt chunk of ", body.size(),
                                        " bytes, need ", kFmtExtensibleBytes));
    }
    const uint16_t valid_bits = ReadU16(p + 18);
    if (valid_bits > format.bits_per_sample) {
      return Invalid(name, absl::StrCat("declares ", valid_bits, " valid bits in a ",
                                        format.bits_per_sample, "-bit sample container"));
    }
    // Samples narrower than their container (20 bits in 24) are left-justified, so decoding
    // the whole container gives the right value.
    if (std::memcmp(p + 26, kSubformatGuidTail, sizeof(kSubformatGuidTail)) != 0) {
      return Invalid(name, absl::StrCat("uses an unknown WAVE_FORMAT_EXTENSIBLE sub-format GUID, "
                                        "which waav cannot read; ",
                                        kSupported));
    }
    tag = ReadU16(p + 24);
  }

  const int bits = format.bits_per_sample;
  if (tag == kFormatPcm) {
    if (bits != 8 && bits != 16 && bits != 24 && bits != 32) {
      return Invalid(name,
                     absl::StrCat("uses ", bits, "-bit PCM, which waav cannot read; ", kSupported));
    }
    format.encoding = Encoding::kPcm;
  } else if (tag == kFormatFloat) {
    if (bits != 32 && bits != 64) {
      return Invalid(
          name, absl::StrCat("uses ", bits, "-bit float, which waav cannot read; ", kSupported));
    }
    format.encoding = Encoding::kFloat;
  } else {
    return Invalid(name, absl::StrFormat("uses encoding 0x%04X (%s), which waav cannot read; %s",
                                         tag, FormatTagName(tag), kSupported));
  }

  if (format.channels == 0) return Invalid(name, "has 0 channels");
  if (format.channels > kMaxWavChannels) {
    return Invalid(name, absl::StrCat("has ", format.channels, " channels (more than ",
                                      kMaxWavChannels, "; corrupt header?)"));
  }
  if (sample_rate_hz < static_cast<uint32_t>(kMinWavSampleRateHz) ||
      sample_rate_hz > static_cast<uint32_t>(kMaxWavSampleRateHz)) {
    return Invalid(name, absl::StrCat("has a sample rate of ", sample_rate_hz, " Hz, outside [",
                                      kMinWavSampleRateHz, ", ", kMaxWavSampleRateHz, "]"));
  }
  format.sample_rate_hz = static_cast<int>(sample_rate_hz);
  const int expected_align = format.channels * bits / 8;
  if (format.block_align != expected_align) {
    return Invalid(
        name, absl::StrCat("has block align ", format.block_align, ", expected ", expected_align,
                           " for ", format.channels, " channel(s) of ", bits, "-bit samples"));
  }
  return format;
}

// Decodes one sample of the given container into [-1, 1) (integers) or as stored (floats).
template <int kBits, Encoding kEncoding>
double DecodeSample(const uint8_t* p) {
  if constexpr (kEncoding == Encoding::kFloat) {
    if constexpr (kBits == 32) {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    } else {
      double v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
  } else if constexpr (kBits == 8) {
    return (static_cast<int>(p[0]) - 128) / 128.0;  // 8-bit PCM is unsigned
  } else if constexpr (kBits == 16) {
    return static_cast<int16_t>(ReadU16(p)) / 32768.0;
  } else if constexpr (kBits == 24) {
    const uint32_t u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                       (static_cast<uint32_t>(p[2]) << 16);
    return (static_cast<int32_t>(u << 8) >> 8) / 8388608.0;  // sign-extend 24 → 32 bits
  } else {
    return static_cast<int32_t>(ReadU32(p)) / 2147483648.0;
  }
}

// Averages the channels of each frame. Sums in double so that the mixdown of integer PCM is
// exact before the single rounding to float.
template <int kBits, Encoding kEncoding>
absl::Status MixDown(const uint8_t* data, size_t frames, int channels, const std::string& name,
                     float* out) {
  constexpr int kBytes = kBits / 8;
  for (size_t f = 0; f < frames; ++f) {
    double sum = 0;
    for (int c = 0; c < channels; ++c) sum += DecodeSample<kBits, kEncoding>(data + c * kBytes);
    data += static_cast<size_t>(channels) * kBytes;
    const float mono = static_cast<float>(sum / channels);
    if constexpr (kEncoding == Encoding::kFloat) {
      // Non-finite samples would poison everything downstream (one NaN makes every log-mel
      // frame NaN through the global maximum), so they are reported rather than passed on.
      if (!std::isfinite(mono)) {
        return Invalid(name, absl::StrCat("contains a non-finite sample (NaN or infinity) at "
                                          "sample frame ",
                                          f));
      }
    }
    out[f] = mono;
  }
  return absl::OkStatus();
}

absl::Status Decode(const Format& format, const uint8_t* data, size_t frames,
                    const std::string& name, float* out) {
  const int ch = format.channels;
  if (format.encoding == Encoding::kFloat) {
    if (format.bits_per_sample == 32)
      return MixDown<32, Encoding::kFloat>(data, frames, ch, name, out);
    return MixDown<64, Encoding::kFloat>(data, frames, ch, name, out);
  }
  switch (format.bits_per_sample) {
    case 8:
      return MixDown<8, Encoding::kPcm>(data, frames, ch, name, out);
    case 16:
      return MixDown<16, Encoding::kPcm>(data, frames, ch, name, out);
    case 24:
      return MixDown<24, Encoding::kPcm>(data, frames, ch, name, out);
    default:
      return MixDown<32, Encoding::kPcm>(data, frames, ch, name, out);
  }
}

}  // namespace

absl::StatusOr<Audio> ParseWav(absl::Span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() > static_cast<uint64_t>(kMaxWavFileBytes)) {
    return Invalid(name, absl::StrCat("is ", bytes.size(), " bytes, larger than the limit of ",
                                      kMaxWavFileBytes, " bytes"));
  }
  const uint8_t* const base = bytes.data();
  const size_t size = bytes.size();
  if (size < 12 || !(IdIs(base, "RIFF") || IdIs(base, "RF64")) || !IdIs(base + 8, "WAVE")) {
    return Invalid(name, "is not a WAV file (no RIFF/WAVE header)");
  }

  std::optional<Format> format;
  std::optional<uint64_t> ds64_data_bytes;  // RF64's real data size, if a ds64 chunk said so
  const uint8_t* data = nullptr;
  size_t data_bytes = 0;
  // Invariant: pos <= size + 1 (a missing pad byte at the very end), so pos + 8 cannot overflow.
  size_t pos = 12;
  while (pos + 8 <= size) {
    const uint8_t* header = base + pos;
    const uint32_t chunk_bytes = ReadU32(header + 4);
    const size_t body = pos + 8;
    const size_t remaining = size - body;
    if (IdIs(header, "data")) {
      uint64_t n = chunk_bytes;
      if (n == kUnknownSize && ds64_data_bytes.has_value()) n = *ds64_data_bytes;
      // Size 0 / 0xFFFFFFFF: a streaming writer never patched the header, so the audio runs to
      // the end of the file. A size beyond the end of the file means the file was cut short
      // (an interrupted download or recording): keep what is there rather than refuse it.
      if (n == 0 || n == kUnknownSize || n > remaining) n = remaining;
      data = base + body;
      data_bytes = static_cast<size_t>(n);
      if (n == remaining) break;
      pos = body + data_bytes + (data_bytes & 1);
      continue;
    }
    if (chunk_bytes > remaining) {
      if (IdIs(header, "fmt ")) {
        return Invalid(name, absl::StrCat("has a truncated fmt chunk (", remaining, " of ",
                                          chunk_bytes, " bytes present)"));
      }
      break;  // A cut-off trailing chunk (metadata after the audio): nothing more to find.
    }
    if (IdIs(header, "fmt ") && !format.has_value()) {
      ASSIGN_OR_RETURN(format, ParseFmt(bytes.subspan(body, chunk_bytes), name));
    } else if (IdIs(header, "ds64") && chunk_bytes >= 16) {
      ds64_data_bytes = ReadU64(base + body + 8);  // riffSize (8 bytes), then dataSize
    }
    pos = body + chunk_bytes + (chunk_bytes & 1);  // chunks are padded to an even size
  }

  if (!format.has_value()) return Invalid(name, "has no fmt chunk");
  if (data == nullptr) return Invalid(name, "has no data chunk");
  // A trailing partial sample frame (a cut-off write) is dropped without complaint.
  const size_t frames = data_bytes / static_cast<size_t>(format->block_align);
  if (frames == 0) return Invalid(name, "contains no audio (no complete sample frame)");

  Audio audio;
  audio.sample_rate_hz = format->sample_rate_hz;
  audio.samples.resize(frames);
  RETURN_IF_ERROR(Decode(*format, data, frames, name, audio.samples.data()));
  return audio;
}

absl::StatusOr<Audio> ReadWavFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  if (fs::is_directory(status)) {
    return absl::NotFoundError(absl::StrCat(path, " is a directory, not a WAV file"));
  }
  if (!fs::is_regular_file(status)) {
    return Invalid(path, "is not a regular file");
  }
  const uintmax_t file_bytes = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, " cannot be sized: ", ec.message()));
  if (file_bytes > static_cast<uintmax_t>(kMaxWavFileBytes)) {
    return Invalid(path, absl::StrCat("is ", file_bytes, " bytes, larger than the limit of ",
                                      kMaxWavFileBytes, " bytes"));
  }

  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string message = absl::StrCat(path, " cannot be opened: ", std::strerror(error));
    if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
    return absl::NotFoundError(message);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(file_bytes));
  const size_t read = std::fread(bytes.data(), 1, bytes.size(), file);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return absl::DataLossError(absl::StrCat(path, " could not be read"));
  bytes.resize(read);  // the file may have shrunk since it was sized
  return ParseWav(bytes, path);
}

}  // namespace waav::audio
