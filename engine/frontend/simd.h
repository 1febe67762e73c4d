// Internal to the front end: the 8-float vector type its kernels are written in. Only .cc files
// of waav_frontend include this; they are compiled for WAAV_CPU_ARCH (x86-64-v3: one AVX
// register per vector). GCC/Clang vector extensions: +, -, *, /, comparisons and ?: act lane-wise
// and a scalar operand is broadcast, so kernels read like scalar code yet compile to SIMD
// whatever the compiler's auto-vectoriser makes of them.
#pragma once

#include <cstdint>
#include <cstring>

namespace waav::frontend::simd {

inline constexpr int kLanes = 8;

typedef float V __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VI __attribute__((vector_size(kLanes * sizeof(int32_t))));

// Vectors live in float arrays and move through memcpy, which compiles to one unaligned vector
// load or store and sidesteps both alignment and aliasing questions.
inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, V v) { std::memcpy(p, &v, sizeof(v)); }
inline V Broadcast(float x) { return V{} + x; }
inline V Max(V a, V b) { return a > b ? a : b; }
inline float ReduceMax(V v) {
  float m = v[0];
  for (int l = 1; l < kLanes; ++l) m = v[l] > m ? v[l] : m;
  return m;
}

}  // namespace waav::frontend::simd
