// G.711 (ITU-T Rec. G.711, 1988) mu-law and A-law expansion: one 8-bit code to one linear sample.
//
// The 256 reconstruction values of each law are computed at compile time from the segment
// structure of G.711's Tables 1 and 2 (8 segments of 16 steps; each segment doubles the step) and
// the bit inversions G.711 applies on the line (all bits for mu-law, the even bits for A-law).
// Values are on the 16-bit PCM scale that the Sun/ITU reference code uses: mu-law's 14-bit
// magnitudes times 4 (full scale +-32124), A-law's 13-bit magnitudes times 8 (full scale +-32256).
#pragma once

#include <array>
#include <cstdint>

namespace waav::audio {
namespace g711_internal {

// Mu-law: code bits (after inverting all 8) are sign (1 = positive), segment (3 bits), step q
// (4 bits). The reconstruction value is the middle of the decision interval,
// ((2q + 33) << segment) - 33, on the 14-bit scale.
constexpr int16_t MulawExpand(uint8_t code) {
  const int c = static_cast<uint8_t>(~code);
  const int segment = (c >> 4) & 7;
  const int q = c & 15;
  const int magnitude = (((2 * q + 33) << segment) - 33) * 4;
  return static_cast<int16_t>((c & 0x80) ? -magnitude : magnitude);
}

// A-law: code bits (after inverting the even bits, XOR 0x55) are sign (1 = positive), segment,
// step q. Segment 0 has steps of 2 from 0, segment s >= 1 steps of 2^s from 2^(s+4); the
// reconstruction value is the middle of the step, on the 13-bit scale.
constexpr int16_t AlawExpand(uint8_t code) {
  const int c = code ^ 0x55;
  const int segment = (c >> 4) & 7;
  const int q = c & 15;
  const int magnitude =
      (segment == 0 ? 2 * q + 1
                    : (1 << (segment + 4)) + (1 << segment) * q + (1 << (segment - 1))) *
      8;
  return static_cast<int16_t>((c & 0x80) ? magnitude : -magnitude);
}

template <int16_t (*Expand)(uint8_t)>
constexpr std::array<int16_t, 256> MakeTable() {
  std::array<int16_t, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = Expand(static_cast<uint8_t>(i));
  return table;
}

inline constexpr std::array<int16_t, 256> kMulawTable = MakeTable<MulawExpand>();
inline constexpr std::array<int16_t, 256> kAlawTable = MakeTable<AlawExpand>();

}  // namespace g711_internal

// Linear 16-bit value of a G.711 code.
inline int16_t MulawToLinear16(uint8_t code) { return g711_internal::kMulawTable[code]; }
inline int16_t AlawToLinear16(uint8_t code) { return g711_internal::kAlawTable[code]; }

}  // namespace waav::audio
