#include "engine/runtime/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace waav {

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

void HalfToFloatArray(const void* halves, float* out, size_t count) {
  const auto* bytes = static_cast<const uint8_t*>(halves);
  constexpr uint32_t kShiftedExponent = 0x7c00u << 13;  // a half's exponent field, as in a float
  for (size_t i = 0; i < count; ++i) {
    uint16_t half;
    std::memcpy(&half, bytes + 2 * i, 2);
    // Move exponent and mantissa into place and rebias the exponent; then fix the two ends of
    // the range: all-ones exponents (inf/NaN) take the float's all-ones exponent, and
    // subnormals are renormalised exactly by one float subtraction.
    uint32_t bits = static_cast<uint32_t>(half & 0x7fffu) << 13;
    const uint32_t exponent = bits & kShiftedExponent;
    bits += (127u - 15u) << 23;
    if (exponent == kShiftedExponent) {
      bits += (128u - 16u) << 23;
    } else if (exponent == 0) {
      bits += 1u << 23;
      bits = std::bit_cast<uint32_t>(std::bit_cast<float>(bits) - std::bit_cast<float>(113u << 23));
    }
    out[i] = std::bit_cast<float>(bits | (static_cast<uint32_t>(half & 0x8000u) << 16));
  }
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) return sign | 0x7e00u;
  const float magnitude = std::fabs(value);
  if (magnitude >= 65520.0f) return sign | 0x7c00u;  // overflow rounds to infinity
  if (magnitude < 6.103515625e-05f) {               // subnormal half range
    const float scaled = magnitude * 16777216.0f;    // 2^24: one unit of the half subnormal
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t exponent = ((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  // Round to nearest even on the 13 dropped bits.
  const uint32_t dropped = mantissa & 0x1fffu;
  mantissa >>= 13;
  if (dropped > 0x1000u || (dropped == 0x1000u && (mantissa & 1u))) {
    ++mantissa;
    if (mantissa == 0x400u) {
      mantissa = 0;
      ++exponent;
    }
  }
  return sign | static_cast<uint16_t>(exponent << 10) | static_cast<uint16_t>(mantissa);
}

}  // namespace waav
