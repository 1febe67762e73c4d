// Index-driven copies: token + position embedding, and appending rows to KV caches.
// Index values are checked on the device; a bad one skips its row and is reported through the
// error word (see common.cuh), since a kernel cannot return a status.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace waav::cuda {

// y[b, t, :] = token_table[tokens[b, t]] + position_table[start_positions[b] + t].
// Tables are f32 or f16 (`*_f16`).
cudaError_t LaunchEmbed(const LaunchContext& ctx, const int32_t* tokens,
                        const int32_t* start_positions, int64_t batch, int64_t time,
                        const void* token_table, bool token_f16, int64_t vocab,
                        const void* position_table, bool position_f16, int64_t max_positions,
                        int64_t channels, float* y);

// dst[b, positions[b] + t, :] = src[b, t, :] for rows of `row_bytes` bytes; dst holds `capacity`
// rows per batch row.
cudaError_t LaunchWriteRows(const LaunchContext& ctx, const void* src, const int32_t* positions,
                            int64_t batch, int64_t rows, int64_t row_bytes, int64_t capacity,
                            void* dst);

// dst row i = src row rows[i] for rows of `row_bytes` bytes (indices already checked). The
// indices travel in the launches' parameters, 256 a launch.
cudaError_t LaunchGatherRows(const LaunchContext& ctx, const void* src, const int64_t* rows,
                             int64_t count, int64_t row_bytes, void* dst);

}  // namespace waav::cuda
