// QuantizeChannels: a block takes 32 channels of one batch row; its 16 warps' lanes are those
// channels (each warp's loads one 128-byte line of a row) and the warps stride the rows, first
// for the channels' maxima (merged through shared memory), then to write the integers.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quantize.cuh"

namespace waav::cuda {
namespace {

constexpr int kChannels = 32;  // a block's channels: one warp's lanes
constexpr int kRowLanes = 16;  // warps, each taking every 16th row

__global__ void __launch_bounds__(kChannels* kRowLanes)
    QuantizeChannelsKernel(const float* x, int64_t rows, int64_t channels, int8_t* q,
                           float* scales) {
  WaitForPreviousKernel();
  const int64_t b = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x) % kChannels;
  const int row_lane = static_cast<int>(threadIdx.x) / kChannels;
  const int64_t c = int64_t{blockIdx.x} * kChannels + lane;
  const bool valid = c < channels;
  const float* xb = x + b * rows * channels;
  float max = 0.0f;
  for (int64_t t = row_lane; valid && t < rows; t += kRowLanes) {
    max = fmaxf(max, fabsf(xb[t * channels + c]));
  }
  __shared__ float maxima[kRowLanes][kChannels];
  maxima[row_lane][lane] = max;
  __syncthreads();
  for (int i = 0; i < kRowLanes; ++i) max = fmaxf(max, maxima[i][lane]);
  const float scale = __fdiv_rn(max, 127.0f);
  if (valid && row_lane == 0) scales[b * channels + c] = scale;
  AllowNextKernel();
  int8_t* qb = q + b * rows * channels;
  for (int64_t t = row_lane; valid && t < rows; t += kRowLanes) {
    const float steps = scale > 0.0f ? rintf(__fdiv_rn(xb[t * channels + c], scale)) : 0.0f;
    qb[t * channels + c] = static_cast<int8_t>(fminf(fmaxf(steps, -127.0f), 127.0f));
  }
}

}  // namespace

cudaError_t LaunchQuantizeChannels(const LaunchContext& ctx, const float* x, int64_t batch,
                                   int64_t rows, int64_t channels, int8_t* q, float* scales) {
  if (batch == 0 || channels == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((channels + kChannels - 1) / kChannels),
                  static_cast<unsigned>(batch));
  return Launch(ctx, QuantizeChannelsKernel, grid, dim3(kChannels * kRowLanes), 0, x, rows,
                channels, q, scales);
}

}  // namespace waav::cuda
