// Element types and device kinds shared by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace waav {

enum class DType : uint8_t {
  kF32,  // IEEE binary32
  kF16,  // IEEE binary16 (weights; converted exactly to f32 on load or in the kernel)
  kI32,  // token ids, positions, lengths
  kI8,   // signed 8-bit integers with scales beside them (Backend::QuantizeChannels)
};

constexpr size_t SizeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI8: return 1;
  }
  return 0;
}

constexpr std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI8: return "i8";
  }
  return "?";
}

enum class DeviceKind : uint8_t { kCpu, kCuda, kHip, kVulkan };

constexpr std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kHip: return "hip";
    case DeviceKind::kVulkan: return "vulkan";
  }
  return "?";
}

// IEEE half <-> float conversions for host code (exact in the f16 -> f32 direction).
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);  // round to nearest even
// `count` halves (raw little-endian bytes, any alignment) to floats; the same values as
// HalfToFloat, in a branch-light loop the compiler vectorises (model loading converts millions).
void HalfToFloatArray(const void* halves, float* out, size_t count);

}  // namespace waav
