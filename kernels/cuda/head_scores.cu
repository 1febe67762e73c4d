#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/head_scores.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kKeys = 32;     // a block's keys: lane j of every warp takes key j
constexpr int kQueries = 32;  // a block's queries: warp w takes w, w + 4, ...
constexpr int kPerWarp = kQueries / kWarpsPerBlock;
constexpr int kChunk = 64;  // head dims staged in shared memory at a time

struct ScoresItems {
  int64_t row[kHeadScoresPerLaunch], head[kHeadScoresPerLaunch], queries[kHeadScoresPerLaunch],
      keys[kHeadScoresPerLaunch], offset[kHeadScoresPerLaunch];
};

// Block (key tile x, query tile y, item z): each thread sums its scores over the head's dims in
// order, a chunk of kChunk dims at a time (keys transposed in shared memory, one key per lane;
// the queries read by all lanes at once), the sums kept in registers across chunks.
template <typename KeyT>
__global__ void __launch_bounds__(kThreads)
    HeadScoresKernel(const float* q, const KeyT* k, int64_t q_len, int64_t k_len, int64_t channels,
                     int head_dim, float scale, ScoresItems items, float* out) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int item = static_cast<int>(blockIdx.z);
  const int64_t n = items.keys[item], queries = items.queries[item], row = items.row[item];
  const int64_t j0 = int64_t{blockIdx.x} * kKeys, t0 = int64_t{blockIdx.y} * kQueries;
  if (j0 >= n || t0 >= queries) return;
  __shared__ float ks[kChunk][kKeys + 1];     // [dim][key]
  __shared__ float qs[kQueries][kChunk + 1];  // [query][dim]
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t column = items.head[item] * head_dim;
  const KeyT* k_base = k + (row * k_len + j0) * channels + column;
  const float* q_base = q + (row * q_len + t0) * channels + column;
  const int64_t keys_here = n - j0 < kKeys ? n - j0 : kKeys;
  const int64_t queries_here = queries - t0 < kQueries ? queries - t0 : kQueries;
  float acc[kPerWarp];
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) acc[i] = 0.0f;
  for (int e0 = 0; e0 < head_dim; e0 += kChunk) {
    const int len = min(kChunk, head_dim - e0);
    for (int i = static_cast<int>(threadIdx.x); i < kKeys * kChunk; i += kThreads) {
      const int key = i / kChunk, e = i % kChunk;  // consecutive threads: one key's dims
      ks[e][key] = key < keys_here && e < len ? ToFloat(k_base[key * channels + e0 + e]) : 0.0f;
    }
    for (int i = static_cast<int>(threadIdx.x); i < kQueries * kChunk; i += kThreads) {
      const int t = i / kChunk, e = i % kChunk;
      qs[t][e] = t < queries_here && e < len ? q_base[t * channels + e0 + e] : 0.0f;
    }
    __syncthreads();
    for (int e = 0; e < len; ++e) {
      const float key = ks[e][lane];
#pragma unroll
      for (int i = 0; i < kPerWarp; ++i) {
        acc[i] = __fadd_rn(acc[i], __fmul_rn(qs[warp + i * kWarpsPerBlock][e], key));
      }
    }
    __syncthreads();  // before the next chunk overwrites the stage
  }
  if (lane >= keys_here) return;
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int t = warp + i * kWarpsPerBlock;
    if (t < queries_here)
      out[items.offset[item] + (t0 + t) * n + j0 + lane] = __fmul_rn(acc[i], scale);
  }
}

}  // namespace

cudaError_t LaunchHeadScores(const LaunchContext& ctx, const float* q, const void* k, bool k_f16,
                             int64_t q_len, int64_t k_len, int64_t channels, int head_dim,
                             float scale, const HeadScoresItem* items, int64_t count, float* out) {
  for (int64_t first = 0; first < count; first += kHeadScoresPerLaunch) {
    const int n = static_cast<int>(std::min<int64_t>(kHeadScoresPerLaunch, count - first));
    ScoresItems params{};
    int64_t max_queries = 0, max_keys = 0;
    for (int i = 0; i < n; ++i) {
      const HeadScoresItem& r = items[first + i];
      params.row[i] = r.row;
      params.head[i] = r.head;
      params.queries[i] = r.queries;
      params.keys[i] = r.keys;
      params.offset[i] = r.offset;
      max_queries = std::max(max_queries, r.queries);
      max_keys = std::max(max_keys, r.keys);
    }
    const dim3 grid(static_cast<unsigned>((max_keys + kKeys - 1) / kKeys),
                    static_cast<unsigned>((max_queries + kQueries - 1) / kQueries),
                    static_cast<unsigned>(n));
    const cudaError_t err = k_f16 ? Launch(ctx, HeadScoresKernel<__half>, grid, dim3(kThreads), 0,
                                           q, static_cast<const __half*>(k), q_len, k_len, channels,
                                           head_dim, scale, params, out)
                                  : Launch(ctx, HeadScoresKernel<float>, grid, dim3(kThreads), 0, q,
                                           static_cast<const float*>(k), q_len, k_len, channels,
                                           head_dim, scale, params, out);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace waav::cuda
