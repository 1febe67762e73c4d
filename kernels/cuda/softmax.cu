// One block per row: each thread keeps an online (max, Σ exp(x − max)) pair over its strided
// elements, the block merges the pairs, and a second pass writes x − max − log(sum). Rows are
// long (51864 logits) and few, so a block of 1024 threads per row keeps the loads in flight.
#include <climits>

#include "kernels/cuda/common.cuh"
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

// (value, id) pairs: the larger value wins, the lower id on ties (std::max_element's choice).
__device__ __forceinline__ bool Better(float v, int id, float best, int best_id) {
  return v > best || (v == best && id < best_id);
}

// One block per row. Pass 1: each thread scans its strided columns in ascending order (the first
// of equal maxima stays), then the block merges the (max, id) pairs. Pass 2 (the row is in L2 by
// then): Σ exp(double(x − max)) over the allowed columns, in f64 like the host loop.
__global__ void ArgmaxLogSumExpKernel(const float* logits, int cols, const uint32_t* masks,
                                      int mask_words, int num_masks, const int32_t* mask_index,
                                      float* out, unsigned long long* error_word) {
  WaitForPreviousKernel();
  AllowNextKernel();
  extern __shared__ uint32_t bits[];
  __shared__ float best_values[kArgmaxThreads / kWarp];
  __shared__ int best_ids[kArgmaxThreads / kWarp];
  __shared__ double sums[kArgmaxThreads / kWarp];
  const int row = static_cast<int>(blockIdx.x);
  const int m = mask_index[row];
  if (m == -1) return;  // the whole block: the row is left out
  if (m < -1 || m >= num_masks) {
    if (threadIdx.x == 0) {
      ReportDeviceError(error_word, DeviceErrorOp::kArgmaxLogSumExp, row, m);
    }
    return;
  }
  for (int i = threadIdx.x; i < mask_words; i += blockDim.x) {
    bits[i] = masks[static_cast<int64_t>(m) * mask_words + i];
  }
  __syncthreads();
  const float* x = logits + static_cast<int64_t>(row) * cols;
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    if ((bits[c >> 5] >> (c & 31)) & 1u) continue;
    const float v = x[c];
    if (v > best) best = v, best_id = c;
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(kFullMask, best, o);
    const int id = __shfl_xor_sync(kFullMask, best_id, o);
    if (Better(v, id, best, best_id)) best = v, best_id = id;
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  if (lane == 0) best_values[warp] = best, best_ids[warp] = best_id;
  __syncthreads();
  best = best_values[0];
  best_id = best_ids[0];
  for (int w = 1; w < warps; ++w) {
    if (Better(best_values[w], best_ids[w], best, best_id)) {
      best = best_values[w];
      best_id = best_ids[w];
    }
  }
  double sum = 0.0;
  if (best != -INFINITY) {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      if ((bits[c >> 5] >> (c & 31)) & 1u) continue;
      sum += exp(static_cast<double>(x[c] - best));
    }
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(kFullMask, sum, o);
  if (lane == 0) sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int w = 0; w < warps; ++w) total += sums[w];
  float* o = out + static_cast<int64_t>(row) * 5;
  o[0] = best == -INFINITY ? 0.0f : static_cast<float>(best_id);
  o[1] = best;
  // SplitF64 (backend.h): three floats whose double sum is `total` exactly.
  o[2] = __double2float_rn(total);
  const double rest = total - static_cast<double>(o[2]);
  o[3] = __double2float_rn(rest);
  o[4] = __double2float_rn(rest - static_cast<double>(o[3]));
}

}  // namespace

cudaError_t LaunchArgmaxLogSumExp(const LaunchContext& ctx, const float* logits, int64_t rows,
                                  int64_t cols, const int32_t* masks, int64_t mask_words,
                                  int64_t num_masks, const int32_t* mask_index, float* out) {
  if (rows == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(mask_words) * sizeof(uint32_t);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // V up to 393,216 columns
  return Launch(ctx, ArgmaxLogSumExpKernel, dim3(static_cast<unsigned>(rows)), dim3(kArgmaxThreads),
                smem, logits, static_cast<int>(cols), reinterpret_cast<const uint32_t*>(masks),
                static_cast<int>(mask_words), static_cast<int>(num_masks), mask_index, out,
                ctx.error_word);
}

}  // namespace waav::cuda
