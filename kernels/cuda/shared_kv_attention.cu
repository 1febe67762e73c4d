// SharedKvAttention on tensor cores: see shared_kv_attention.cuh for the layout.
#include <algorithm>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/shared_kv_attention.cuh"

namespace waav::cuda {
namespace {

#if WAAV_GPU_HAS_MMA

constexpr int kGroup = 8;  // queries per block: the mma's 16 rows are their f16 parts and errors
constexpr int kPad = 8;    // halves of padding per shared row: 8 rows of ldmatrix hit 8 bank groups
constexpr int kMaxWarps = kSharedKvMaxWidth / 64;
constexpr int kMaxSplits = 16;  // key ranges a (row, group) is split into at most (the merge's)

// A block of `warps` warps: 8-key column tiles of the scores, one per warp (two for the last warp
// of an odd count), so tiles of a multiple of 16 keys (the weighted sum's k-step); rows of the
// width plus padding; the queries' 16 rows and the tile's scores beside `stages` tiles.
constexpr int TileKeys(int warps) { return 16 * ((warps + 1) / 2); }
constexpr size_t RowBytes(int warps) { return static_cast<size_t>(64 * warps + kPad) * 2; }
constexpr size_t FixedBytes(int warps) {
  return 16 * RowBytes(warps) + static_cast<size_t>(kGroup) * TileKeys(warps) * 4;
}
constexpr size_t SmemBytes(int warps, int stages) {
  return FixedBytes(warps) + static_cast<size_t>(stages) * TileKeys(warps) * RowBytes(warps);
}
// The deep pipeline: as many tiles as one block per multiprocessor holds (227 KB, less 2 KB for
// the merge's static arrays and the block's reserve), at most 6.
constexpr int DeepStages(int warps) {
  const size_t stages =
      (227 * 1024 - 2048 - FixedBytes(warps)) / (TileKeys(warps) * RowBytes(warps));
  return stages > 6 ? 6 : static_cast<int>(stages);
}

template <int kWarps, int kStages>
struct Shape {
  static constexpr int kWidth = 64 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTileKeys = TileKeys(kWarps);
  static constexpr int kKeyTiles = kTileKeys / 8;
  static constexpr int kRow = kWidth + kPad;  // halves per shared row
  static constexpr size_t kQueryBytes = size_t{16} * kRow * 2;
  static constexpr size_t kTileBytes = size_t{kTileKeys} * kRow * 2;
  static constexpr size_t kScoreBytes = size_t{kGroup} * kTileKeys * 4;
  // kStages tiles in shared memory, kStages − 1 of them in flight while one is computed on.
  static constexpr size_t kSmemBytes = kQueryBytes + kStages * kTileBytes + kScoreBytes;
  static_assert(kSmemBytes == SmemBytes(kWarps, kStages));
};

struct Params {
  const float* q;
  const __half* kv;
  void* out;  // f32, or f16 where out_f16 (rounded from the f32 result)
  bool out_f16;
  int64_t queries, kv_len, keys_per_split;
  int groups, splits;
  int64_t retain_rows;  // SharedKvPlan::retain_rows
  float scale_log2;     // scale · log2(e): the softmax runs on exp2
  float* partials;      // per (row, group, split): o [8][width], then m [8] and l [8]
  int* counters;        // per (row, group)
};

__device__ __forceinline__ uint32_t HalfBits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// p as the f16 pair (hi, lo) with hi + lo = p to ~2^-22: hi = f16(p), lo = f16(p − hi).
__device__ __forceinline__ void SplitPair(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(p0, p1);
  hi = HalfBits(h);
  lo = HalfBits(__floats2half2_rn(p0 - __low2float(h), p1 - __high2float(h)));
}

template <int kWarps, int kStages>
__global__ void __launch_bounds__(32 * kWarps) SharedKvKernel(Params p) {
  static_assert(kStages >= 2);
  using S = Shape<kWarps, kStages>;
  constexpr int kWidth = S::kWidth, kRow = S::kRow, kTileKeys = S::kTileKeys;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* queries_s = reinterpret_cast<__half*>(smem);
  auto* tiles_s = reinterpret_cast<__half*>(smem + S::kQueryBytes);
  auto* scores_s = reinterpret_cast<float*>(smem + S::kQueryBytes + kStages * S::kTileBytes);
  const int split = static_cast<int>(blockIdx.x), group = static_cast<int>(blockIdx.y);
  const int64_t b = blockIdx.z;
  const int t = static_cast<int>(threadIdx.x), warp = t / kWarp, lane = t % kWarp;
  const int row = lane / 4, quad = lane % 4;  // the mma fragments' row and column pair
  const int64_t key_begin = split * p.keys_per_split;
  const int64_t key_end =
      key_begin + p.keys_per_split < p.kv_len ? key_begin + p.keys_per_split : p.kv_len;
  const int tiles = static_cast<int>((key_end - key_begin + kTileKeys - 1) / kTileKeys);
  const __half* kv = p.kv + b * p.kv_len * kWidth;
  const bool hinted = p.retain_rows >= 0;
  uint64_t policy = 0;
  if (hinted && b < p.retain_rows) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  } else if (hinted) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  }

  WaitForPreviousKernel();
  // One commit group per tile index, empty past the last tile, so that waiting for all but the
  // newest kStages − 2 groups always means the tile about to be computed on is in.
  auto load_tile = [&](int tile) {
    const int64_t first = key_begin + int64_t{tile} * kTileKeys;
    __half* dst = tiles_s + (tile % kStages) * kTileKeys * kRow;
    constexpr int kChunks = kWidth / 8;  // 16-byte chunks per key
    for (int i = t; tile < tiles && i < kTileKeys * kChunks; i += S::kThreads) {
      const int key = i / kChunks, chunk = i % kChunks;
      const bool valid = first + key < key_end;
      // Keys past the range are zero-filled from a valid address (their scores are masked).
      const __half* src = kv + (valid ? first + key : key_begin) * kWidth + chunk * 8;
      if (hinted) {
        mma::CopyAsync16Hinted(dst + key * kRow + chunk * 8, src, valid ? 16 : 0, policy);
      } else {
        mma::CopyAsync16(dst + key * kRow + chunk * 8, src, valid ? 16 : 0);
      }
    }
    mma::CommitAsync();
  };
  for (int tile = 0; tile < kStages - 1; ++tile) load_tile(tile);
  // The queries, scaled, as f16 parts (rows 0-7) and rounding errors (rows 8-15).
  for (int i = t; i < kGroup * kWidth; i += S::kThreads) {
    const int r = i / kWidth, d = i % kWidth;
    const int64_t query = int64_t{group} * kGroup + r;
    const float x =
        query < p.queries ? p.q[(b * p.queries + query) * kWidth + d] * p.scale_log2 : 0;
    const __half hi = __float2half_rn(x);
    queries_s[r * kRow + d] = hi;
    queries_s[(r + kGroup) * kRow + d] = __float2half_rn(x - __half2float(hi));
  }

  float o[8][4] = {};  // dims [64·warp, 64·warp + 64): rows `row` (f16 parts) and `row` + 8
  float m = -INFINITY, l = 0;  // query `row`'s running max (log2 units) and this lane's sum part
  const __half* a_lane = queries_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * kRow + (lane / 16) * 8;
  for (int tile = 0; tile < tiles; ++tile) {
    mma::WaitAsync<kStages - 2>();
    // Tile `tile` is in; every warp is done with tile − 1's buffer and with the scores.
    __syncthreads();
    load_tile(tile + kStages - 1);
    const __half* tile_s = tiles_s + (tile % kStages) * kTileKeys * kRow;

    // Scores of keys [8·n, 8·n + 8) over the whole width, two k-steps per ldmatrix of keys.
    for (int n = warp; n < S::kKeyTiles; n += kWarps) {
      float even[4] = {}, odd[4] = {};
      const __half* b_lane = tile_s + (n * 8 + lane % 8) * kRow + (lane / 8) * 8;
#pragma unroll 4
      for (int k = 0; k < kWidth; k += 32) {
        uint32_t keys[4], q0[4], q1[4];
        mma::LdMatrix4(keys, b_lane + k);
        mma::LdMatrix4(q0, a_lane + k);
        mma::LdMatrix4(q1, a_lane + k + 16);
        mma::Mma16816(even, q0, keys[0], keys[1]);
        mma::Mma16816(odd, q1, keys[2], keys[3]);
      }
      const int tile_key = n * 8 + 2 * quad;
      const int64_t key = key_begin + int64_t{tile} * kTileKeys + tile_key;
      float2 s;
      s.x = key < key_end ? even[0] + even[2] + odd[0] + odd[2] : -INFINITY;
      s.y = key + 1 < key_end ? even[1] + even[3] + odd[1] + odd[3] : -INFINITY;
      *reinterpret_cast<float2*>(scores_s + row * kTileKeys + tile_key) = s;
    }
    __syncthreads();

    // Online softmax of query `row` over the tile (every warp alike), then its weighted sum of
    // the tile's keys over this warp's dims.
    constexpr int kSteps = kTileKeys / 16;
    float x[kSteps][4];
    float tile_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const float* at = scores_s + row * kTileKeys + 16 * k + 2 * quad;
      const float2 first = *reinterpret_cast<const float2*>(at);
      const float2 second = *reinterpret_cast<const float2*>(at + 8);
      x[k][0] = first.x;
      x[k][1] = first.y;
      x[k][2] = second.x;
      x[k][3] = second.y;
      tile_max = fmaxf(tile_max, fmaxf(fmaxf(first.x, first.y), fmaxf(second.x, second.y)));
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
    const float m_new = fmaxf(m, tile_max);  // finite: every tile has a key of the range
    const float alpha = exp2f(m - m_new);
    m = m_new;
    l *= alpha;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] *= alpha;
    }
    const __half* v_lane =
        tile_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * kRow + warp * 64 + (lane / 16) * 8;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      float e[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        e[i] = exp2f(x[k][i] - m_new);
        l += e[i];
      }
      uint32_t a[4];  // rows `row`: f16 parts; rows `row` + 8: their errors
      SplitPair(e[0], e[1], a[0], a[1]);
      SplitPair(e[2], e[3], a[2], a[3]);
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        uint32_t values[4];
        mma::LdMatrix4Trans(values, v_lane + 16 * k * kRow + n * 8);
        mma::Mma16816(o[n], a, values[0], values[1]);
        mma::Mma16816(o[n + 1], a, values[2], values[3]);
      }
    }
  }

  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);
  const int64_t query = int64_t{group} * kGroup + row;
  const int dim0 = warp * 64 + 2 * quad;
  if (p.splits == 1) {
    if (query < p.queries) {
      const int64_t at = (b * p.queries + query) * kWidth + dim0;
      const float inverse = 1.0f / l;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float2 v = make_float2((o[n][0] + o[n][2]) * inverse, (o[n][1] + o[n][3]) * inverse);
        if (p.out_f16) {
          *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + at + n * 8) =
              __float22half2_rn(v);
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + at + n * 8) = v;
        }
      }
    }
    AllowNextKernel();
    return;
  }

  // A key range: its unnormalised sums, max and sum out; the last range of (row, group) merges.
  const int64_t slot = (b * p.groups + group) * p.splits + split;
  float* part = p.partials + slot * kGroup * (kWidth + 2);
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    *reinterpret_cast<float2*>(part + row * kWidth + dim0 + n * 8) =
        make_float2(o[n][0] + o[n][2], o[n][1] + o[n][3]);
  }
  if (warp == 0 && quad == 0) {
    part[kGroup * kWidth + row] = m;
    part[kGroup * kWidth + kGroup + row] = l;
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  int* counter = p.counters + b * p.groups + group;
  if (t == 0) last = atomicAdd(counter, 1) == p.splits - 1;
  __syncthreads();
  AllowNextKernel();
  if (!last) return;
  __threadfence();
  // The ranges' maxima and sums at once (one load each, all in flight) into shared memory, each
  // query's range weights from them, then each output a float4 of dims over every range (the
  // ranges' loads unrolled, so that they are in flight together: a chain of dependent loads per
  // output made the merge the launch's longest part).
  constexpr int kStride = kGroup * (kWidth + 2);
  const float* parts = p.partials + (b * p.groups + group) * p.splits * kStride;
  __shared__ float weight_s[kMaxSplits][kGroup], sum_s[kMaxSplits][kGroup];
  for (int i = t; i < p.splits * kGroup; i += S::kThreads) {
    const int s = i / kGroup, r = i % kGroup;
    weight_s[s][r] = __ldcg(parts + s * kStride + kGroup * kWidth + r);
    sum_s[s][r] = __ldcg(parts + s * kStride + kGroup * kWidth + kGroup + r);
  }
  __syncthreads();
  if (t < kGroup) {
    float max = -INFINITY, den = 0;
    for (int s = 0; s < p.splits; ++s) max = fmaxf(max, weight_s[s][t]);
    for (int s = 0; s < p.splits; ++s) {
      weight_s[s][t] = exp2f(weight_s[s][t] - max);
      den += weight_s[s][t] * sum_s[s][t];
    }
    for (int s = 0; s < p.splits; ++s) weight_s[s][t] /= den;
  }
  __syncthreads();
  for (int i = 4 * t; i < kGroup * kWidth; i += 4 * S::kThreads) {
    const int r = i / kWidth, d = i % kWidth;
    const int64_t q_index = int64_t{group} * kGroup + r;
    if (q_index >= p.queries) continue;
    float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < p.splits) {
        const float4 o = __ldcg(reinterpret_cast<const float4*>(parts + s * kStride + i));
        const float w = weight_s[s][r];
        acc.x += w * o.x;
        acc.y += w * o.y;
        acc.z += w * o.z;
        acc.w += w * o.w;
      }
    }
    const int64_t at = (b * p.queries + q_index) * kWidth + d;
    if (p.out_f16) {
      __half2* out = reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + at);
      out[0] = __floats2half2_rn(acc.x, acc.y);
      out[1] = __floats2half2_rn(acc.z, acc.w);
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + at) = acc;
    }
  }
  if (t == 0) *counter = 0;
}

template <int kWarps, int kStages>
cudaError_t LaunchWarps(const LaunchContext& ctx, const SharedKvArgs& a, const SharedKvPlan& plan,
                        float* partials, int* counters) {
  using S = Shape<kWarps, kStages>;
  static std::once_flag once;
  static cudaError_t attribute = cudaSuccess;
  std::call_once(once, [] {
    attribute = cudaFuncSetAttribute(SharedKvKernel<kWarps, kStages>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmemBytes));
  });
  if (attribute != cudaSuccess) return attribute;
  const int groups = static_cast<int>((a.queries + kGroup - 1) / kGroup);
  const Params params{a.q,
                      static_cast<const __half*>(a.kv),
                      a.out,
                      a.out_f16,
                      a.queries,
                      a.kv_len,
                      plan.keys_per_split,
                      groups,
                      plan.splits,
                      plan.retain_rows,
                      a.scale * 1.4426950408889634f,
                      partials,
                      counters};
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(groups),
                  static_cast<unsigned>(a.batch));
  return Launch(ctx, SharedKvKernel<kWarps, kStages>, grid, dim3(S::kThreads), S::kSmemBytes,
                params);
}

template <int kWarps>
cudaError_t LaunchFor(int warps, const LaunchContext& ctx, const SharedKvArgs& a,
                      const SharedKvPlan& plan, float* partials, int* counters) {
  if constexpr (kWarps > kMaxWarps) {
    return cudaErrorInvalidValue;
  } else {
    if (warps != kWarps) return LaunchFor<kWarps + 1>(warps, ctx, a, plan, partials, counters);
    if (plan.stages == 2) return LaunchWarps<kWarps, 2>(ctx, a, plan, partials, counters);
    return LaunchWarps<kWarps, DeepStages(kWarps)>(ctx, a, plan, partials, counters);
  }
}

#endif  // WAAV_GPU_HAS_MMA

}  // namespace

bool SharedKvAttentionAvailable() { return WAAV_GPU_HAS_MMA != 0; }

int SharedKvMaxWidth(const GpuShape& gpu) {
#if WAAV_GPU_HAS_MMA
  for (int warps = kMaxWarps; warps >= 1; --warps) {
    if (SmemBytes(warps, 2) <= static_cast<size_t>(std::max(0, gpu.shared_bytes_per_block))) {
      return 64 * warps;
    }
  }
#else
  (void)gpu;
#endif
  return 0;
}

SharedKvPlan PlanSharedKvAttention(const SharedKvArgs& a, const GpuShape& gpu, int64_t max_counters,
                                   int force_splits, bool deep_pipeline, int64_t l2_retain_bytes) {
  SharedKvPlan plan;
#if WAAV_GPU_HAS_MMA
  auto aligned = [](const void* ptr, uintptr_t bytes) {
    return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
  };
  if (a.width < 64 || a.width > 64 * kMaxWarps || a.width % 64 != 0 || a.kv_len < 1 ||
      !aligned(a.kv, 16) || !aligned(a.out, 16)) {
    return plan;
  }
  const int warps = a.width / 64;
  // The device's shared memory: the deep pipeline only where its tiles fit (a Hopper), two tiles
  // where those fit, else no kernel.
  const size_t block_limit = static_cast<size_t>(std::max(0, gpu.shared_bytes_per_block));
  plan.stages =
      deep_pipeline && SmemBytes(warps, DeepStages(warps)) <= block_limit ? DeepStages(warps) : 2;
  if (SmemBytes(warps, plan.stages) > block_limit) return plan;
  plan.supported = true;
  const int64_t tile_keys = TileKeys(warps);
  const int64_t tiles = (a.kv_len + tile_keys - 1) / tile_keys;
  const int64_t groups = (a.queries + kGroup - 1) / kGroup;
  const int64_t items = a.batch * groups;
  // Blocks resident per multiprocessor by shared memory (1 KB reserved a block, and the merge's
  // static arrays).
  const int64_t resident = std::max<int64_t>(
      1, gpu.shared_bytes_per_sm / static_cast<int64_t>(SmemBytes(warps, plan.stages) + 2048));
  int64_t splits = items > 0 ? resident * gpu.sm_count / items : 1;
  if (force_splits > 0) splits = force_splits;
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(tiles, kMaxSplits));
  if (splits > 1 && items > max_counters) splits = 1;
  plan.keys_per_split = (tiles + splits - 1) / splits * tile_keys;
  plan.splits = static_cast<int>((a.kv_len + plan.keys_per_split - 1) / plan.keys_per_split);
  if (plan.splits > 1) {
    plan.counters = items;
    plan.partial_bytes = static_cast<size_t>(items * plan.splits) * kGroup * (a.width + 2) * 4;
  }
  if (l2_retain_bytes >= 0) {
    const int64_t row_bytes = a.kv_len * a.width * 2;
    plan.retain_rows = std::min<int64_t>(a.batch, l2_retain_bytes / row_bytes);
  }
#else
  (void)a;
  (void)gpu;
  (void)max_counters;
  (void)force_splits;
  (void)deep_pipeline;
  (void)l2_retain_bytes;
#endif
  return plan;
}

cudaError_t SetAsidePersistingL2(size_t bytes, size_t* previous, size_t* set) {
#if defined(WAAV_HIP)
  (void)bytes;
  (void)previous;
  (void)set;
  return cudaErrorNotSupported;
#else
  int device = 0, max_bytes = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxPersistingL2CacheSize, device);
  }
  if (e != cudaSuccess) return e;
  if (max_bytes <= 0) return cudaErrorNotSupported;
  if ((e = cudaDeviceGetLimit(previous, cudaLimitPersistingL2CacheSize)) != cudaSuccess) return e;
  *set = std::min(bytes, static_cast<size_t>(max_bytes));
  return cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, *set);
#endif
}

void RestorePersistingL2(size_t previous) {
#if !defined(WAAV_HIP)
  // Teardown: errors here have no one to go to.
  (void)cudaCtxResetPersistingL2Cache();
  (void)cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, previous);
#else
  (void)previous;
#endif
}

cudaError_t LaunchSharedKvAttention(const LaunchContext& ctx, const SharedKvArgs& a,
                                    const SharedKvPlan& plan, float* partials, int* counters) {
#if WAAV_GPU_HAS_MMA
  if (!plan.supported) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.queries == 0) return cudaSuccess;
  return LaunchFor<1>(a.width / 64, ctx, a, plan, partials, counters);
#else
  (void)ctx;
  (void)a;
  (void)plan;
  (void)partials;
  (void)counters;
  return cudaErrorNotSupported;
#endif
}

}  // namespace waav::cuda
