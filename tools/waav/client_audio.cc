#include "tools/waav/client_audio.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/audio/g711.h"
#include "engine/audio/stream_decoder.h"
#include "engine/audio/wav_reader.h"
#include "engine/runtime/status.h"

namespace waav::cli {
namespace {

constexpr int kMinChunkMs = 10;
constexpr int kMaxChunkMs = 5000;
constexpr int kMaxTailSilenceMs = 600'000;
// Container files are fed to the local decoder in pieces this small, so that chunk boundaries
// fall within about this many bytes of where their audio ends.
constexpr size_t kContainerPieceBytes = 256;

enum class FileKind { kWav, kFlac, kOgg, kUnknown };

FileKind SniffKind(absl::Span<const uint8_t> bytes) {
  auto starts = [&](const char* magic) {
    const size_t n = std::strlen(magic);
    return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
  };
  if (starts("RIFF") || starts("RF64")) return FileKind::kWav;
  if (starts("fLaC")) return FileKind::kFlac;
  if (starts("OggS")) return FileKind::kOgg;
  return FileKind::kUnknown;
}

absl::Status Invalid(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// Sorted (expansion, code) pairs of one G.711 law, for nearest-value encoding.
using G711Table = std::array<std::pair<int16_t, uint8_t>, 256>;

template <typename Expand>
G711Table MakeG711Table(Expand expand) {
  G711Table table;
  for (int code = 0; code < 256; ++code) {
    table[static_cast<size_t>(code)] = {expand(static_cast<uint8_t>(code)),
                                        static_cast<uint8_t>(code)};
  }
  std::sort(table.begin(), table.end());
  return table;
}

uint8_t NearestCode(const G711Table& table, int16_t sample) {
  auto it =
      std::lower_bound(table.begin(), table.end(), sample,
                       [](const std::pair<int16_t, uint8_t>& e, int16_t v) { return e.first < v; });
  if (it == table.end()) return table.back().second;
  if (it == table.begin()) return it->second;
  const auto below = std::prev(it);
  return (sample - below->first) <= (it->first - sample) ? below->second : it->second;
}

// Encodes mono float samples in `encoding` (a raw one), appending to `out`.
void EncodeRaw(const std::vector<float>& samples, v1::AudioEncoding encoding, std::string* out) {
  switch (encoding) {
    case v1::AUDIO_ENCODING_FLOAT32:
      out->reserve(samples.size() * 4);
      for (float x : samples) {
        char b[4];
        std::memcpy(b, &x, 4);  // the build targets little-endian x86-64 and ARM only
        out->append(b, 4);
      }
      return;
    case v1::AUDIO_ENCODING_MULAW:
      out->reserve(samples.size());
      for (float x : samples) out->push_back(static_cast<char>(MulawEncode(FloatToPcm16(x))));
      return;
    case v1::AUDIO_ENCODING_ALAW:
      out->reserve(samples.size());
      for (float x : samples) out->push_back(static_cast<char>(AlawEncode(FloatToPcm16(x))));
      return;
    default:  // LINEAR16
      out->reserve(samples.size() * 2);
      for (float x : samples) {
        const uint16_t v = static_cast<uint16_t>(FloatToPcm16(x));
        out->push_back(static_cast<char>(v & 0xFF));
        out->push_back(static_cast<char>(v >> 8));
      }
  }
}

int BytesPerSample(v1::AudioEncoding encoding) {
  switch (encoding) {
    case v1::AUDIO_ENCODING_FLOAT32:
      return 4;
    case v1::AUDIO_ENCODING_MULAW:
    case v1::AUDIO_ENCODING_ALAW:
      return 1;
    default:
      return 2;
  }
}

absl::StatusOr<ClientAudio> FromWav(absl::Span<const uint8_t> file_bytes, const std::string& name,
                                    const ClientAudioOptions& options) {
  v1::AudioEncoding encoding;
  switch (options.encoding) {
    case EncodingChoice::kAuto:
    case EncodingChoice::kLinear16:
      encoding = v1::AUDIO_ENCODING_LINEAR16;
      break;
    case EncodingChoice::kFloat32:
      encoding = v1::AUDIO_ENCODING_FLOAT32;
      break;
    case EncodingChoice::kMulaw:
      encoding = v1::AUDIO_ENCODING_MULAW;
      break;
    case EncodingChoice::kAlaw:
      encoding = v1::AUDIO_ENCODING_ALAW;
      break;
    default:
      return Invalid(name,
                     "is a WAV file; it can be sent as linear16, float32, mulaw or alaw, "
                     "not re-encoded as FLAC or Ogg Opus (send a .flac/.opus file instead)");
  }
  ASSIGN_OR_RETURN(audio::Audio wav, audio::ParseWav(file_bytes, name));
  if (wav.sample_rate_hz < audio::kMinInputSampleRateHz ||
      wav.sample_rate_hz > audio::kMaxInputSampleRateHz) {
    return Invalid(name, absl::StrCat("has a sample rate of ", wav.sample_rate_hz,
                                      " Hz; waav accepts ", audio::kMinInputSampleRateHz, "..",
                                      audio::kMaxInputSampleRateHz, " Hz"));
  }
  const int64_t rate = wav.sample_rate_hz;
  wav.samples.resize(wav.samples.size() +
                     static_cast<size_t>(rate * options.tail_silence_ms / 1000));

  ClientAudio out;
  out.name = name;
  out.format.set_encoding(encoding);
  out.format.set_sample_rate_hz(static_cast<uint32_t>(rate));
  out.format.set_channels(1);
  out.time_base_hz = static_cast<int>(rate);
  EncodeRaw(wav.samples, encoding, &out.bytes);

  const int64_t frames = static_cast<int64_t>(wav.samples.size());
  const int64_t chunk_frames = std::max<int64_t>(1, rate * options.chunk_ms / 1000);
  const size_t bytes_per_frame = static_cast<size_t>(BytesPerSample(encoding));
  for (int64_t begin = 0; begin < frames; begin += chunk_frames) {
    const int64_t end = std::min(frames, begin + chunk_frames);
    out.chunks.push_back({static_cast<size_t>(begin) * bytes_per_frame,
                          static_cast<size_t>(end) * bytes_per_frame, end * 1'000'000 / rate});
  }
  out.duration_us = frames * 1'000'000 / rate;
  return out;
}

absl::StatusOr<ClientAudio> FromContainer(absl::Span<const uint8_t> file_bytes,
                                          const std::string& name, FileKind kind,
                                          const ClientAudioOptions& options) {
  const bool flac = kind == FileKind::kFlac;
  const EncodingChoice own = flac ? EncodingChoice::kFlac : EncodingChoice::kOggOpus;
  if (options.encoding != EncodingChoice::kAuto && options.encoding != own) {
    return Invalid(name, absl::StrCat("is ", flac ? "a FLAC" : "an Ogg",
                                      " file; it is sent as it is, so --encoding must be auto or ",
                                      flac ? "flac" : "ogg_opus"));
  }
  if (options.tail_silence_ms != 0) {
    return Invalid(name, "tail silence can only be added to WAV input");
  }
  audio::AudioFormatSpec spec;
  spec.encoding = flac ? audio::AudioEncoding::kFlac : audio::AudioEncoding::kOggOpus;
  audio::StreamDecoderOptions decoder_options;
  decoder_options.output_sample_rate_hz = 0;  // only the count of input samples matters here
  auto decoder = audio::StreamDecoder::Create(spec, decoder_options);
  if (!decoder.ok()) return Invalid(name, std::string(decoder.status().message()));

  ClientAudio out;
  out.name = name;
  out.format.set_encoding(flac ? v1::AUDIO_ENCODING_FLAC : v1::AUDIO_ENCODING_OGG_OPUS);
  out.bytes.assign(reinterpret_cast<const char*>(file_bytes.data()), file_bytes.size());

  // Feed the file in small pieces; a chunk closes at the first piece after which the decoded
  // audio reaches the next multiple of chunk_ms.
  const int64_t chunk_us = int64_t{options.chunk_ms} * 1000;
  int64_t next_boundary_us = chunk_us;
  size_t chunk_begin = 0;
  std::vector<float> scratch;
  auto decoded_us = [&]() -> int64_t {
    const int rate = (*decoder)->input_sample_rate_hz();
    return rate > 0 ? (*decoder)->input_samples_decoded() * 1'000'000 / rate : 0;
  };
  for (size_t offset = 0; offset < file_bytes.size(); offset += kContainerPieceBytes) {
    const size_t n = std::min(kContainerPieceBytes, file_bytes.size() - offset);
    scratch.clear();
    absl::Status fed = (*decoder)->Feed(file_bytes.subspan(offset, n), &scratch);
    if (!fed.ok()) return Invalid(name, std::string(fed.message()));
    const int64_t t_us = decoded_us();
    if (t_us >= next_boundary_us) {
      out.chunks.push_back({chunk_begin, offset + n, t_us});
      chunk_begin = offset + n;
      next_boundary_us = (t_us / chunk_us + 1) * chunk_us;
    }
  }
  scratch.clear();
  absl::Status finished = (*decoder)->Finish(&scratch);
  if (!finished.ok()) return Invalid(name, std::string(finished.message()));
  out.duration_us = decoded_us();
  if (out.duration_us == 0) return Invalid(name, "contains no audio");
  if (chunk_begin < file_bytes.size()) {
    out.chunks.push_back({chunk_begin, file_bytes.size(), out.duration_us});
  } else {
    out.chunks.back().end_us = out.duration_us;
  }
  out.time_base_hz = (*decoder)->input_sample_rate_hz();
  return out;
}

}  // namespace

absl::StatusOr<EncodingChoice> ParseEncodingChoice(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  if (absl::StartsWith(n, "audio_encoding_")) n = n.substr(std::strlen("audio_encoding_"));
  if (n == "auto") return EncodingChoice::kAuto;
  if (n == "linear16" || n == "pcm16" || n == "s16le") return EncodingChoice::kLinear16;
  if (n == "float32" || n == "f32le") return EncodingChoice::kFloat32;
  if (n == "mulaw" || n == "ulaw") return EncodingChoice::kMulaw;
  if (n == "alaw") return EncodingChoice::kAlaw;
  if (n == "flac") return EncodingChoice::kFlac;
  if (n == "ogg_opus" || n == "opus" || n == "ogg") return EncodingChoice::kOggOpus;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown encoding \"", name, "\"; expected one of: ", kEncodingChoices));
}

int16_t FloatToPcm16(float sample) {
  const float scaled = std::nearbyint(sample * 32768.0f);
  if (!(scaled >= -32768.0f)) return -32768;  // NaN too, though WAV input is always finite
  if (scaled > 32767.0f) return 32767;
  return static_cast<int16_t>(scaled);
}

uint8_t MulawEncode(int16_t sample) {
  static const G711Table table = MakeG711Table(audio::g711_internal::MulawExpand);
  return NearestCode(table, sample);
}

uint8_t AlawEncode(int16_t sample) {
  static const G711Table table = MakeG711Table(audio::g711_internal::AlawExpand);
  return NearestCode(table, sample);
}

std::chrono::steady_clock::time_point ChunkDueTime(std::chrono::steady_clock::time_point start,
                                                   int64_t end_us, double speed) {
  if (!(speed > 0)) return start;
  const double due_us = static_cast<double>(end_us) / speed;
  return start + std::chrono::microseconds(static_cast<int64_t>(std::llround(due_us)));
}

absl::StatusOr<ClientAudio> MakeClientAudio(absl::Span<const uint8_t> file_bytes,
                                            const std::string& name,
                                            const ClientAudioOptions& options) {
  if (options.chunk_ms < kMinChunkMs || options.chunk_ms > kMaxChunkMs) {
    return absl::InvalidArgumentError(absl::StrCat("chunk length ", options.chunk_ms,
                                                   " ms is outside ", kMinChunkMs, "..",
                                                   kMaxChunkMs, " ms"));
  }
  if (options.tail_silence_ms < 0 || options.tail_silence_ms > kMaxTailSilenceMs) {
    return absl::InvalidArgumentError(absl::StrCat("tail silence ", options.tail_silence_ms,
                                                   " ms is outside 0..", kMaxTailSilenceMs, " ms"));
  }
  if (file_bytes.empty()) return Invalid(name, "is empty");
  const FileKind kind = SniffKind(file_bytes);
  switch (kind) {
    case FileKind::kWav:
      return FromWav(file_bytes, name, options);
    case FileKind::kFlac:
    case FileKind::kOgg:
      return FromContainer(file_bytes, name, kind, options);
    case FileKind::kUnknown:
      break;
  }
  return Invalid(name, "is not a WAV (RIFF/RF64), FLAC (fLaC) or Ogg (OggS) file");
}

absl::StatusOr<ClientAudio> LoadClientAudio(const std::string& path,
                                            const ClientAudioOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  if (!fs::is_regular_file(status)) return Invalid(path, "is not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, " cannot be sized: ", ec.message()));
  if (size > static_cast<uintmax_t>(audio::kMaxWavFileBytes)) {
    return Invalid(path, absl::StrCat("is ", size, " bytes, more than the limit of ",
                                      audio::kMaxWavFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, " cannot be opened"));
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return MakeClientAudio(bytes, path, options);
}

}  // namespace waav::cli
