// One block per row: each thread keeps an online (max, Σ exp(x − max)) pair over its strided
// elements, the block merges the pairs, and a second pass writes x − max − log(sum). Rows are
// long (51864 logits) and few, so a block of 1024 threads per row keeps the loads in flight.
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
