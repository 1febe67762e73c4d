// The audio a client sends to waavd: a file turned into the bytes of one waav.v1 encoding, cut
// into chunks that each carry the stream time at which their audio ends, so that a sender can
// pace them at real time (a chunk is due once its last sample would have been spoken).
//
// WAV files are read with engine/audio (any PCM or float format, mixed down to mono) and encoded
// as LINEAR16 (default), FLOAT32, MULAW or ALAW at the file's own sample rate. FLAC and Ogg Opus
// files are sent as they are, byte for byte; they are decoded here once, locally, only to learn
// how much audio each span of bytes holds, so that their chunks are paced like raw audio.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "waav/v1/audio.pb.h"

namespace waav::cli {

// What to send. kAuto: LINEAR16 for WAV files, the container's own encoding for FLAC and Ogg.
enum class EncodingChoice { kAuto, kLinear16, kFloat32, kMulaw, kAlaw, kFlac, kOggOpus };

// "auto", "linear16", "float32", "mulaw", "alaw", "flac", "ogg_opus" (case-insensitive; the
// proto names "LINEAR16", "OGG_OPUS" and "AUDIO_ENCODING_..." also work). InvalidArgument naming
// the accepted values otherwise.
absl::StatusOr<EncodingChoice> ParseEncodingChoice(const std::string& name);

// The names ParseEncodingChoice accepts, for --help.
inline constexpr char kEncodingChoices[] = "auto, linear16, float32, mulaw, alaw, flac, ogg_opus";

struct ClientAudioOptions {
  EncodingChoice encoding = EncodingChoice::kAuto;
  // Audio per chunk (message), in ms of stream time. 10..5000. Container chunks end at the first
  // decoded sample past each multiple of it, so they hold about this much. Default: 100.
  int chunk_ms = 100;
  // Silence appended after a WAV file's audio, in ms (0..600000): lets the server end the last
  // utterance at a silence endpoint, as a microphone that stays open would, instead of at the
  // end of the audio. WAV input only (InvalidArgument for FLAC/Ogg). Default: 0.
  int tail_silence_ms = 0;
};

// One message's worth of audio: bytes [begin, end) of ClientAudio::bytes.
struct AudioChunk {
  size_t begin = 0;
  size_t end = 0;
  // Stream time at the end of the audio this chunk completes, in microseconds.
  int64_t end_us = 0;
};

struct ClientAudio {
  std::string name;  // the file, for messages
  // The AudioFormat to declare: raw encodings carry the rate and channel count (1); containers
  // leave both 0 (their header says).
  v1::AudioFormat format;
  std::string bytes;  // the encoded audio, sent in order
  // Cover `bytes` in order, without gaps; every chunk holds at least one byte; end_us never
  // decreases. The last chunk ends at duration_us.
  std::vector<AudioChunk> chunks;
  int64_t duration_us = 0;  // stream time of all of it (tail silence included)
  int time_base_hz = 0;     // the input's own rate, in which the server counts stream time
};

// Reads `path` (WAV, FLAC or Ogg Opus, told apart by their first bytes) and prepares it.
// InvalidArgument naming the file for unreadable, unknown, corrupt or empty audio, an encoding
// that does not fit the file (FLAC requested for a WAV ...), or options out of range.
absl::StatusOr<ClientAudio> LoadClientAudio(const std::string& path,
                                            const ClientAudioOptions& options);

// As LoadClientAudio, on a file already in memory; `name` is used in messages only.
absl::StatusOr<ClientAudio> MakeClientAudio(absl::Span<const uint8_t> file_bytes,
                                            const std::string& name,
                                            const ClientAudioOptions& options);

// G.711 encoders: the code whose expansion (engine/audio/g711.h) is nearest to `sample`, so that
// decoding what is encoded gives the closest value G.711 can carry.
uint8_t MulawEncode(int16_t sample);
uint8_t AlawEncode(int16_t sample);

// Float sample (nominal [-1, 1], as engine/audio reads WAV files) to 16-bit PCM: x * 32768,
// rounded, clipped to [-32768, 32767]; the inverse of the WAV reader for 16-bit files.
int16_t FloatToPcm16(float sample);

// Pacing. `speed` is the multiple of real time (1: real time); speed <= 0 means "as fast as
// possible": every chunk is due at `start`. Otherwise a chunk ending at stream time `end_us` is
// due at start + end_us / speed.
std::chrono::steady_clock::time_point ChunkDueTime(std::chrono::steady_clock::time_point start,
                                                   int64_t end_us, double speed);

}  // namespace waav::cli
