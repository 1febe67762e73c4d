// HalfGemm: one kernel for the many-row GEMMs of the fast path (kFast, f16 weights), instead of
// f32→f16 conversion + cuBLAS + bias/activation epilogue (three launches):
//   y[M, N] = act(A[M, K] · w[N, K]ᵀ + bias[N])
// A is f32 in memory (a dense [M, K] matrix, or the im2col matrix of a Conv1d input gathered on
// the fly: an implicit GEMM, no column matrix in memory), rounded to f16 as it is staged into
// shared memory (the arithmetic of cuBLAS on an f16 copy: x rounded to f16, f32 accumulation).
// mma.sync m16n8k16 tensor-core tiles of BM × 64 outputs per block of 4 warps, K in steps of 32,
// A (f32) and the weights (f16) copied by cp.async 3 or 4 steps ahead (a first version that
// staged A through registers one step ahead was latency-bound: 26 µs for 1500x1536->384 on an
// H100, against 14.7 for conversion + cuBLAS + epilogue).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

// A Conv1d input seen as its im2col matrix: A[b·out_time + t, c·K + j] =
// x[b, t·stride − padding + j, c] (0 outside [0, time)).
struct ConvGather {
  int64_t time = 0, in_channels = 0, out_time = 0;
  int64_t kernel_size = 0, stride = 1, padding = 0;
};

struct HalfGemmArgs {
  const float* x;     // dense: [M, K]; conv: [B, time, in_channels]
  const void* w;      // f16 [N, K]
  const float* bias;  // [N] or null
  float* y;           // [M, N]
  int64_t m, n, k;
  Epilogue act;
  const ConvGather* conv;           // null: dense A
  const float* residual = nullptr;  // [M, N] added after the activation, or null; may be y
  // Few-row GEMMs (fewer 32 x 64 tiles than multiprocessors): 32 x 32 tiles, twice the blocks.
  bool narrow_tiles = true;
  // K split into this many ranges (grid.z; HalfGemmSplits), their sums added by the last block
  // of each tile: partials holds HalfGemmSplitBytes(), counters kHalfGemmSplitCounters zeroed
  // ints (left zeroed). Dense A only; 1, a conv or null pointers: no split.
  int splits = 1;
  float* partials = nullptr;
  int* counters = nullptr;
  // Dense A only: the result's columns written as planes of plane_cols columns (LinearPlanes:
  // f32 planes, 8-byte aligned, plane_cols a multiple of 8 dividing N) instead of y; no residual.
  const PlaneOutputs* planes = nullptr;
  int64_t plane_cols = 0;
};

// Tiles a split GEMM may have (its arrival counters).
constexpr int64_t kHalfGemmSplitCounters = 4096;

// How many K ranges a dense GEMM of these shapes runs in so that its grid has at least
// waves x sm_count blocks (each range at least two steps of 32): few-row GEMMs, whose tiles
// alone leave most multiprocessors idle and each block a long serial walk along K (a decoder
// step's 384 x 384 projection at 64 rows: 24 tiles of 32 x 32, 12 steps each). 1 when the tiles
// already fill the grid, or waves <= 0.
int HalfGemmSplits(int64_t m, int64_t n, int64_t k, bool narrow_tiles, int sm_count, int waves);
// Scratch for the partial sums of `splits` ranges (0 for one).
size_t HalfGemmSplitBytes(int64_t m, int64_t n, int splits);

// Whether HalfGemm handles these shapes and addresses (CUDA build with mma.sync; K and N
// multiples of 8, M < 2^21; x, w and y 16-byte aligned, bias 8-byte aligned).
bool HalfGemmSupported(const HalfGemmArgs& args);
// Once per process and device, before the first launch (allows the kernels more than 48 KB of
// dynamic shared memory; not done at launch because a graph may be capturing then).
cudaError_t PrepareHalfGemm();
cudaError_t LaunchHalfGemm(const LaunchContext& ctx, const HalfGemmArgs& args);

}  // namespace waav::cuda
