// Host-side matrix transpose in cache-sized tiles. A row-by-row transpose writes every element to
// a different cache line once the destination rows are longer than a line (a log-mel window:
// 80 x 3000 floats, 240 000 scattered writes); tiles of 32 x 32 read and write whole lines.
#pragma once

#include <algorithm>
#include <cstdint>

namespace waav {

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols (strides in
// elements, src_stride >= cols, dst_stride >= rows): the transpose of a block of a larger
// matrix into a block of another. src and dst must not overlap.
template <typename T>
void TransposeTiled(const T* src, int64_t rows, int64_t cols, int64_t src_stride, T* dst,
                    int64_t dst_stride) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        T* out = dst + c * dst_stride;
        for (int64_t r = r0; r < r1; ++r) out[r] = src[r * src_stride + c];
      }
    }
  }
}

// The whole matrix: dst [cols, rows] = transpose of src [rows, cols].
template <typename T>
void TransposeTiled(const T* src, int64_t rows, int64_t cols, T* dst) {
  TransposeTiled(src, rows, cols, cols, dst, rows);
}

}  // namespace waav
