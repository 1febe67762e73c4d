// The CPU backend's compute kernels on raw pointers. The backend (cpu_backend.cc) validates
// shapes, dtypes and index values before calling them; the kernels trust their arguments.
//
// Kernels are compiled with -march=${WAAV_CPU_ARCH}; this header is kept free of inline code so
// that nothing compiled for that target is shared with the baseline-compiled backend code.
#pragma once

#include <cstdint>

#include "engine/runtime/dtype.h"

namespace waav {
class ThreadPool;
}  // namespace waav

namespace waav::cpu {

using waav::ThreadPool;
class Scratch;

// What every kernel runs with. Scratch has one slot per pool participant plus one shared slot
// (index pool->num_threads()).
struct KernelContext {
  ThreadPool* pool;
  Scratch* scratch;
};

// y[M, N] = act(x[M, K] · w[N, K]ᵀ + bias[N]); w is f32 or f16; bias may be null.
void LinearKernel(const KernelContext& ctx, const float* x, int64_t m, int64_t k, const void* w,
                  DType w_dtype, int64_t n, const float* bias, bool gelu, float* y);

// Time-major 1-D convolution, see Backend::Conv1d. x[B, T, Cin], w[Cout, Cin, K] (f32 or f16),
// bias[Cout], y[B, t_out, Cout].
struct Conv1dShape {
  int64_t batch, time, in_channels, out_channels, kernel_size, out_time;
  int stride, padding;
};
void Conv1dKernel(const KernelContext& ctx, const float* x, const void* w, DType w_dtype,
                  const float* bias, const Conv1dShape& shape, bool gelu, float* y);

void LayerNormKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t cols,
                     const float* gamma, const float* beta, float eps, float* y);
// y = a + b over n values, b repeated every `period` values (n a multiple of it; n: no repeat).
void AddKernel(const KernelContext& ctx, const float* a, const float* b, float* y, int64_t n,
               int64_t period);
void GeluKernel(const KernelContext& ctx, const float* x, float* y, int64_t n);
void LogSoftmaxKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t cols,
                      float* y);

// See Backend::Attention. kv_lengths: null (all keys) or B values already checked to lie in
// [0, Tk]. Queries that see no key produce zeros.
struct AttentionShape {
  int64_t batch, q_len, kv_len, heads, head_dim;
};
void AttentionKernel(const KernelContext& ctx, const float* q, const float* k, const float* v,
                     const int32_t* kv_lengths, const AttentionShape& shape, float scale,
                     bool causal, float* out);

// See Backend::SharedKvAttention: q[B, Tq, H·D], kv[B, Tk, D] (Tk ≥ 1), out[B, Tq, H·D].
struct SharedKvAttentionShape {
  int64_t batch, q_len, kv_len, heads, width;
};
// kv: f32 values, or i8 values with f32 scales [B, D] (QuantizeChannelsKernel's output).
struct SharedKvSource {
  const float* f32 = nullptr;
  const int8_t* i8 = nullptr;
  const float* scales = nullptr;
};
void SharedKvAttentionKernel(const KernelContext& ctx, const float* q, const SharedKvSource& kv,
                             const SharedKvAttentionShape& shape, float scale, float* out);

// See Backend::QuantizeChannels: x[B, T, C] -> q[B, T, C], scales[B, C].
struct QuantizeChannelsShape {
  int64_t batch, rows, channels;
};
void QuantizeChannelsKernel(const KernelContext& ctx, const float* x,
                            const QuantizeChannelsShape& shape, int8_t* q, float* scales);

// y[b, t] = token_table[tokens[b, t]] + position_table[start_positions[b] + t]; indices
// already checked.
void EmbedKernel(const KernelContext& ctx, const int32_t* tokens, const int32_t* start_positions,
                 int64_t batch, int64_t time, const void* token_table, DType token_dtype,
                 const void* position_table, DType position_dtype, int64_t channels, float* y);

}  // namespace waav::cpu
