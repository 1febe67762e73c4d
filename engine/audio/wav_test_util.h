// Test-only helpers that assemble RIFF/WAVE files byte by byte, so that tests can build exactly
// the header (correct, sloppy or corrupt) they need.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace waav::audio::wav_test {

using Bytes = std::vector<uint8_t>;

inline constexpr uint16_t kTagPcm = 0x0001;
inline constexpr uint16_t kTagFloat = 0x0003;
inline constexpr uint16_t kTagExtensible = 0xFFFE;

inline void PutU16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
inline void PutU32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void PutU64(Bytes& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void PutId(Bytes& b, const char* id) { b.insert(b.end(), id, id + 4); }
inline void Append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }

// A chunk: id, size, body and the pad byte after an odd-sized body. `declared_size` overrides
// the size field (for sloppy or corrupt headers) without changing the body.
inline Bytes Chunk(const char* id, const Bytes& body, int64_t declared_size = -1) {
  Bytes b;
  PutId(b, id);
  PutU32(b, static_cast<uint32_t>(declared_size >= 0 ? declared_size
                                                     : static_cast<int64_t>(body.size())));
  Append(b, body);
  if (body.size() % 2 == 1) b.push_back(0);
  return b;
}

// The 16-byte fmt body. block_align < 0 means the consistent value.
inline Bytes FmtBody(uint16_t tag, int channels, int sample_rate_hz, int bits,
                     int block_align = -1) {
  const int align = block_align >= 0 ? block_align : channels * bits / 8;
  Bytes b;
  PutU16(b, tag);
  PutU16(b, static_cast<uint16_t>(channels));
  PutU32(b, static_cast<uint32_t>(sample_rate_hz));
  PutU32(b, static_cast<uint32_t>(static_cast<uint64_t>(sample_rate_hz) * align));
  PutU16(b, static_cast<uint16_t>(align));
  PutU16(b, static_cast<uint16_t>(bits));
  return b;
}

// The 40-byte WAVE_FORMAT_EXTENSIBLE fmt body with sub-format `subtag`.
inline Bytes ExtensibleFmtBody(uint16_t subtag, int channels, int sample_rate_hz, int bits,
                               int valid_bits, bool corrupt_guid = false) {
  Bytes b = FmtBody(kTagExtensible, channels, sample_rate_hz, bits);
  PutU16(b, 22);  // cbSize
  PutU16(b, static_cast<uint16_t>(valid_bits));
  PutU32(b, channels == 2 ? 0x3 : 0x4);  // channel mask: FL|FR, or FC
  PutU16(b, subtag);
  const uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                            0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
  b.insert(b.end(), tail, tail + 14);
  if (corrupt_guid) b.back() ^= 0xFF;
  return b;
}

// "RIFF" size "WAVE" followed by the chunks.
inline Bytes Riff(const std::vector<Bytes>& chunks, const char* magic = "RIFF") {
  Bytes body;
  PutId(body, "WAVE");
  for (const Bytes& c : chunks) Append(body, c);
  Bytes b;
  PutId(b, magic);
  PutU32(b, static_cast<uint32_t>(body.size()));
  Append(b, body);
  return b;
}

inline Bytes Pcm16(const std::vector<int16_t>& v) {
  Bytes b;
  for (int16_t s : v) PutU16(b, static_cast<uint16_t>(s));
  return b;
}
inline Bytes Float32(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A plain 16-bit PCM WAV file.
inline Bytes SimpleWav16(const std::vector<int16_t>& interleaved, int channels,
                         int sample_rate_hz) {
  return Riff({Chunk("fmt ", FmtBody(kTagPcm, channels, sample_rate_hz, 16)),
               Chunk("data", Pcm16(interleaved))});
}

// A 32-bit float WAV file.
inline Bytes SimpleWavFloat(const std::vector<float>& interleaved, int channels,
                            int sample_rate_hz) {
  return Riff({Chunk("fmt ", FmtBody(kTagFloat, channels, sample_rate_hz, 32)),
               Chunk("data", Float32(interleaved))});
}

}  // namespace waav::audio::wav_test
