// One block per row: each thread keeps an online (max, Σ exp(x − max)) pair over its strided
// elements, the block merges the pairs, and a second pass writes x − max − log(sum). Rows are
// long (51864 logits) and few, so a block of 1024 threads per row keeps the loads in flight.
#include <algorithm>
#include <climits>

#if !defined(WAAV_HIP)
#include <cooperative_groups.h>
#endif

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/softmax.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void LogSoftmaxKernel(const float* x, int64_t cols, float* y) {
  WaitForPreviousKernel();
  AllowNextKernel();
  __shared__ float scratch[kThreads / kWarp];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float max = -INFINITY, sum = 0.0f;
  auto update = [&](float v) {
    if (v > max) {
      sum = sum * expf(max - v) + 1.0f;  // exp(−inf) = 0 on the first element
      max = v;
    } else if (v != -INFINITY) {  // a masked logit adds nothing (and −inf − −inf is NaN)
      sum += expf(v - max);
    }
  };
  // Four independent loads in flight per step: the row is long and the block is alone on its
  // multiprocessor when there are few rows.
  int64_t c = threadIdx.x;
  for (; c + 3 * kThreads < cols; c += 4 * kThreads) {
    const float v0 = xr[c], v1 = xr[c + kThreads], v2 = xr[c + 2 * kThreads],
                v3 = xr[c + 3 * kThreads];
    update(v0);
    update(v1);
    update(v2);
    update(v3);
  }
  for (; c < cols; c += kThreads) update(xr[c]);
  const float row_max = BlockMax(max, scratch);
  // A thread that saw no element (or only −inf) contributes nothing.
  const float part = max == -INFINITY ? 0.0f : sum * expf(max - row_max);
  const float row_sum = BlockSum(part, scratch);
  const float shift = row_max + logf(row_sum);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] - shift;
}

}  // namespace

cudaError_t LaunchLogSoftmax(const LaunchContext& ctx, const float* x, int64_t rows, int64_t cols,
                             float* y) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  // Grid dims beyond 2^31 rows are not a concern for logits.
  return Launch(ctx, LogSoftmaxKernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, x,
                cols, y);
}

}  // namespace waav::cuda

namespace waav::cuda {
namespace {

constexpr int kArgmaxThreads = 512;
constexpr int kArgmaxWarps = kArgmaxThreads / kWarp;

// (value, id) pairs: the larger value wins, the lower id on ties (std::max_element's choice).
// A total order on non-NaN values, so merging pairs in any order gives the scan's choice.
__device__ __forceinline__ bool Better(float v, int id, float best, int best_id) {
  return v > best || (v == best && id < best_id);
}

__device__ __forceinline__ bool Disabled(const uint32_t* bits, int word0, int c) {
  return ((bits[(c >> 5) - word0] >> (c & 31)) & 1u) != 0;
}

// Calls visit(c, x[c]) for the allowed columns c of [begin, end) that this thread takes
// (begin + threadIdx.x, then every blockDim.x), in ascending order, four loads in flight at a
// time. `bits` holds the mask words from word0 on.
template <typename Visit>
__device__ __forceinline__ void ForAllowedColumns(const float* x, int begin, int end,
                                                  const uint32_t* bits, int word0, Visit visit) {
  constexpr int kUnroll = 4;
  const int stride = static_cast<int>(blockDim.x);
  for (int c0 = begin + static_cast<int>(threadIdx.x); c0 < end; c0 += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * stride;
      v[u] = c < end ? x[c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * stride;
      if (c < end && !Disabled(bits, word0, c)) visit(c, v[u]);
    }
  }
}

// The (max, lowest id) of the allowed columns [begin, end) of x that this thread visits
// (ForAllowedColumns), merged over the block: each thread scans its columns in ascending order,
// so the first of equal maxima stays. Every thread returns the block's pair.
__device__ void BlockArgmax(const float* x, int begin, int end, const uint32_t* bits, int word0,
                            float* best_out, int* id_out) {
  __shared__ float best_values[kArgmaxWarps];
  __shared__ int best_ids[kArgmaxWarps];
  float best = -INFINITY;
  int best_id = INT_MAX;
  ForAllowedColumns(x, begin, end, bits, word0, [&](int c, float v) {
    if (v > best) best = v, best_id = c;
  });
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(kFullMask, best, o);
    const int id = __shfl_xor_sync(kFullMask, best_id, o);
    if (Better(v, id, best, best_id)) best = v, best_id = id;
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) best_values[warp] = best, best_ids[warp] = best_id;
  __syncthreads();
  best = best_values[0];
  best_id = best_ids[0];
  for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) {
    if (Better(best_values[w], best_ids[w], best, best_id)) {
      best = best_values[w];
      best_id = best_ids[w];
    }
  }
  *best_out = best;
  *id_out = best_id;
}

// Σ exp(double(x_c − max)) over the allowed columns [begin, end) (the difference in f32, exp and
// sum in f64), summed over the block in a tree order; the result in thread 0 only.
__device__ double BlockSumExp(const float* x, int begin, int end, const uint32_t* bits, int word0,
                              float max) {
  __shared__ double sums[kArgmaxWarps];
  double sum = 0.0;
  ForAllowedColumns(x, begin, end, bits, word0,
                    [&](int, float v) { sum += exp(static_cast<double>(v - max)); });
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(kFullMask, sum, o);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) sums[warp] = sum;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) total += sums[w];
  }
  return total;
}

// The mask of `row`, or −1 to leave it out (also for a bad index, which thread 0 of the block
// that `report`s reports).
__device__ int RowMask(const int32_t* mask_index, int row, int num_masks, bool report,
                       unsigned long long* error_word) {
  const int m = mask_index[row];
  if (m < -1 || m >= num_masks) {
    if (report && threadIdx.x == 0) {
      ReportDeviceError(error_word, DeviceErrorOp::kArgmaxLogSumExp, row, m);
    }
    return -1;
  }
  return m;
}

// One block per row (GPUs without thread-block clusters). Pass 1 the block's (max, id); pass 2
// (the row is in L2 by then) the sum.
__global__ void ArgmaxLogSumExpKernel(const float* logits, int cols, const uint32_t* masks,
                                      int mask_words, int num_masks, const int32_t* mask_index,
                                      float* out, unsigned long long* error_word) {
  WaitForPreviousKernel();
  AllowNextKernel();
  extern __shared__ uint32_t bits[];
  const int row = static_cast<int>(blockIdx.x);
  const int m = RowMask(mask_index, row, num_masks, /*report=*/true, error_word);
  if (m == -1) return;  // the whole block: the row is left out
  for (int i = threadIdx.x; i < mask_words; i += blockDim.x) {
    bits[i] = masks[static_cast<int64_t>(m) * mask_words + i];
  }
  __syncthreads();
  const float* x = logits + static_cast<int64_t>(row) * cols;
  float best = -INFINITY;
  int best_id = INT_MAX;
  BlockArgmax(x, 0, cols, bits, 0, &best, &best_id);
  const double total = best == -INFINITY ? 0.0 : BlockSumExp(x, 0, cols, bits, 0, best);
  if (threadIdx.x == 0) WriteChoice(out + static_cast<int64_t>(row) * 5, best, best_id, total);
}

#if !defined(WAAV_HIP)

// One thread-block cluster of kCluster blocks per row (grid kCluster × rows; a block of 512
// threads alone cost ~60 us of each greedy token at one row of Whisper's 51864 logits on an
// H100: one multiprocessor's dependent loads and f64 exps; docs/benchmarks.md, session 24):
// block r takes the r-th slice of the row's columns (whole mask words), the cluster agrees on
// the row's (max, id) through distributed shared memory, each block sums its slice against that
// max, and block 0 adds the blocks' sums in rank order. The same choice and maximum as
// ArgmaxLogSumExpKernel; the sum in another (still fixed) order. 16 blocks is a non-portable
// cluster size (LaunchArgmaxLogSumExp allows it first).
template <int kCluster>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kArgmaxThreads)
    ClusterArgmaxLogSumExpKernel(const float* logits, int cols, int slice_words,
                                 const uint32_t* masks, int mask_words, int num_masks,
                                 const int32_t* mask_index, float* out,
                                 unsigned long long* error_word) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  WaitForPreviousKernel();
  AllowNextKernel();
  extern __shared__ uint32_t bits[];
  __shared__ float slice_best;
  __shared__ int slice_best_id;
  __shared__ double slice_sum;
  __shared__ float row_best;
  __shared__ int row_best_id;
  const int row = static_cast<int>(blockIdx.y);
  const int rank = static_cast<int>(cluster.block_rank());
  // Every block of the cluster reads the same index and leaves together: none of them then
  // waits at a cluster barrier or reads another's shared memory.
  const int m = RowMask(mask_index, row, num_masks, /*report=*/rank == 0, error_word);
  if (m == -1) return;
  const int word0 = rank * slice_words;
  const int words = max(0, min(slice_words, mask_words - word0));
  for (int i = threadIdx.x; i < words; i += blockDim.x) {
    bits[i] = masks[static_cast<int64_t>(m) * mask_words + word0 + i];
  }
  __syncthreads();
  const float* x = logits + static_cast<int64_t>(row) * cols;
  const int begin = min(cols, word0 * 32), end = min(cols, (word0 + words) * 32);
  float best = -INFINITY;
  int best_id = INT_MAX;
  BlockArgmax(x, begin, end, bits, word0, &best, &best_id);
  if (threadIdx.x == 0) slice_best = best, slice_best_id = best_id;
  cluster.sync();
  if (threadIdx.x < kWarp) {
    const unsigned lane = threadIdx.x;
    best = -INFINITY;
    best_id = INT_MAX;
    if (lane < kCluster) {
      best = *cluster.map_shared_rank(&slice_best, lane);
      best_id = *cluster.map_shared_rank(&slice_best_id, lane);
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float v = __shfl_xor_sync(kFullMask, best, o);
      const int id = __shfl_xor_sync(kFullMask, best_id, o);
      if (Better(v, id, best, best_id)) best = v, best_id = id;
    }
    if (lane == 0) row_best = best, row_best_id = best_id;
  }
  __syncthreads();
  best = row_best;
  best_id = row_best_id;
  const double sum = best == -INFINITY ? 0.0 : BlockSumExp(x, begin, end, bits, word0, best);
  if (threadIdx.x == 0) slice_sum = sum;
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    double total = 0.0;
    for (unsigned r = 0; r < kCluster; ++r) total += *cluster.map_shared_rank(&slice_sum, r);
    WriteChoice(out + static_cast<int64_t>(row) * 5, best, best_id, total);
  }
  cluster.sync();  // no block leaves while block 0 may still read its sum
#endif
}

// Whether the current GPU runs thread-block clusters (compute capability 9.0 and up, and this
// binary's sm_90 code: Sm90CodeRuns).
bool ClustersAvailable() { return Sm90CodeRuns(); }

template <int kCluster>
cudaError_t LaunchClusterArgmax(const LaunchContext& ctx, const float* logits, int64_t rows,
                                int64_t cols, const uint32_t* mask_bits, int64_t mask_words,
                                int64_t num_masks, const int32_t* mask_index, float* out) {
  if (kCluster > 8) {
    // Per device and kernel; cheap, and a refusal is an error of this launch.
    const cudaError_t allowed = cudaFuncSetAttribute(
        ClusterArgmaxLogSumExpKernel<kCluster>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (allowed != cudaSuccess) return allowed;
  }
  const int64_t slice_words = (mask_words + kCluster - 1) / kCluster;
  return Launch(ctx, ClusterArgmaxLogSumExpKernel<kCluster>,
                dim3(kCluster, static_cast<unsigned>(rows)), dim3(kArgmaxThreads),
                static_cast<size_t>(slice_words) * sizeof(uint32_t), logits, static_cast<int>(cols),
                static_cast<int>(slice_words), mask_bits, static_cast<int>(mask_words),
                static_cast<int>(num_masks), mask_index, out, ctx.error_word);
}

#endif  // !defined(WAAV_HIP)

__global__ void FeedChoicesKernel(const float* choices, const int32_t* mask_index, int rows,
                                  int max_position, int32_t* tokens, int32_t* positions,
                                  int32_t* lengths, unsigned long long* error_word) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= rows || mask_index[b] < 0) return;
  const float token = choices[static_cast<int64_t>(b) * 5];
  if (!(token >= 0.0f && token < 16777216.0f && token == floorf(token))) {
    ReportDeviceError(error_word, DeviceErrorOp::kFeedChoices, b, __float_as_int(token));
    return;
  }
  const int position = static_cast<int>(
      min(static_cast<int64_t>(positions[b]) + 1, static_cast<int64_t>(max_position)));
  positions[b] = position;
  lengths[b] = position + 1;
  tokens[b] = static_cast<int32_t>(token);
}

}  // namespace

cudaError_t LaunchArgmaxLogSumExp(const LaunchContext& ctx, const float* logits, int64_t rows,
                                  int64_t cols, const int32_t* masks, int64_t mask_words,
                                  int64_t num_masks, const int32_t* mask_index, float* out,
                                  int cluster_blocks) {
  if (rows == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(mask_words) * sizeof(uint32_t);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // V up to 393,216 columns
  const auto* mask_bits = reinterpret_cast<const uint32_t*>(masks);
#if !defined(WAAV_HIP)
  if (cluster_blocks > 0 && rows <= 65535 && ClustersAvailable()) {
    // 16 blocks a row while every row's cluster is resident at once (4 blocks of 512 threads an
    // SM), else 8: on an H100 16 took a token at one row from 95-96 to 94 us but 64 rows from
    // 424 to 432 (docs/benchmarks.md, session 24).
    const bool sixteen =
        cluster_blocks >= 16 && rows * 16 <= int64_t{4} * std::max(ctx.sm_count, 1);
    return sixteen ? LaunchClusterArgmax<16>(ctx, logits, rows, cols, mask_bits, mask_words,
                                             num_masks, mask_index, out)
                   : LaunchClusterArgmax<8>(ctx, logits, rows, cols, mask_bits, mask_words,
                                            num_masks, mask_index, out);
  }
#else
  (void)cluster_blocks;
#endif
  return Launch(ctx, ArgmaxLogSumExpKernel, dim3(static_cast<unsigned>(rows)), dim3(kArgmaxThreads),
                smem, logits, static_cast<int>(cols), mask_bits, static_cast<int>(mask_words),
                static_cast<int>(num_masks), mask_index, out, ctx.error_word);
}

cudaError_t LaunchFeedChoices(const LaunchContext& ctx, const float* choices,
                              const int32_t* mask_index, int64_t rows, int32_t max_position,
                              int32_t* tokens, int32_t* positions, int32_t* lengths) {
  constexpr int kFeedThreads = 128;
  return Launch(ctx, FeedChoicesKernel, dim3(CeilDiv(rows, kFeedThreads)), dim3(kFeedThreads), 0,
                choices, mask_index, static_cast<int>(rows), static_cast<int>(max_position), tokens,
                positions, lengths, ctx.error_word);
}

}  // namespace waav::cuda
