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

constexpr int kPadI8 = 16;  // bytes of padding per shared i8 row (keeps its chunks 16-byte aligned)

// A block of `warps` warps: 8-key column tiles of the scores, one per warp (two for the last warp
// of an odd count), so tiles of a multiple of 16 keys (the weighted sum's k-step); rows of the
// width plus padding; the queries' 16 rows and the tile's scores beside `stages` tiles. An i8 kv
// (`int8`) lands in a ring of i8 tiles; the scores widen their keys in registers, and each warp
// widens its 64 dims of 16 keys at a time into a buffer of its own for the weighted sum.
constexpr int TileKeys(int warps) { return 16 * ((warps + 1) / 2); }
constexpr size_t RowBytes(int warps) { return static_cast<size_t>(64 * warps + kPad) * 2; }
constexpr size_t RowBytesI8(int warps) { return static_cast<size_t>(64 * warps + kPadI8); }
constexpr int kValueRow = 64 + kPad;  // halves per row of a warp's widened values
constexpr size_t kWarpValueBytes = size_t{16} * kValueRow * 2;
constexpr size_t FixedBytes(int warps, bool int8) {
  return 16 * RowBytes(warps) + static_cast<size_t>(kGroup) * TileKeys(warps) * 4 +
         (int8 ? warps * kWarpValueBytes : 0);
}
constexpr size_t StageBytes(int warps, bool int8) {
  return TileKeys(warps) * (int8 ? RowBytesI8(warps) : RowBytes(warps));
}
constexpr size_t SmemBytes(int warps, int stages, bool int8) {
  return FixedBytes(warps, int8) + static_cast<size_t>(stages) * StageBytes(warps, int8);
}
// The deep pipeline: as many tiles as one block per multiprocessor holds (227 KB, less 2 KB for
// the merge's static arrays and the block's reserve), at most 6.
constexpr int DeepStages(int warps, bool int8) {
  const size_t stages = (227 * 1024 - 2048 - FixedBytes(warps, int8)) / StageBytes(warps, int8);
  return stages > 6 ? 6 : static_cast<int>(stages);
}

template <int kWarps, int kStages, bool kInt8>
struct Shape {
  static constexpr int kWidth = 64 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTileKeys = TileKeys(kWarps);
  static constexpr int kKeyTiles = kTileKeys / 8;
  static constexpr int kRow = kWidth + kPad;      // halves per shared f16 row
  static constexpr int kRowI8 = kWidth + kPadI8;  // bytes per shared i8 row
  static constexpr size_t kQueryBytes = size_t{16} * kRow * 2;
  static constexpr size_t kStageBytes = StageBytes(kWarps, kInt8);
  static constexpr size_t kScoreBytes = size_t{kGroup} * kTileKeys * 4;
  // kStages tiles in shared memory, kStages − 1 of them in flight while one is computed on (an
  // i8 kv's per-warp widened values after them).
  static constexpr size_t kSmemBytes =
      kQueryBytes + kStages * kStageBytes + kScoreBytes + (kInt8 ? kWarps * kWarpValueBytes : 0);
  static_assert(kSmemBytes == SmemBytes(kWarps, kStages, kInt8));
};

struct Params {
  const float* q;
  const void* kv;          // f16, or i8 (kInt8)
  const float* kv_scales;  // kInt8: [B, width], kv's value = kv · kv_scales[channel]
  void* out;               // f32, or f16 where out_f16 (rounded from the f32 result)
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

// Four i8 values (one word) as two f16 pairs, exactly: each byte's sign flipped (v + 128 in
// [0, 255]) becomes the low byte of the f16 1024 + v + 128, less 1152.
__device__ __forceinline__ void WidenI8x4(uint32_t word, uint32_t& low_pair, uint32_t& high_pair) {
  const __half2 bias = __float2half2_rn(1152.0f);
  const uint32_t biased = word ^ 0x80808080u;
  uint32_t pair0 = __byte_perm(biased, 0x64646464u, 0x4140);
  uint32_t pair1 = __byte_perm(biased, 0x64646464u, 0x4342);
  low_pair = HalfBits(__hsub2(*reinterpret_cast<__half2*>(&pair0), bias));
  high_pair = HalfBits(__hsub2(*reinterpret_cast<__half2*>(&pair1), bias));
}

// An i8 kv's scores read each key's dims four at a time (one word): within each 16 dims, the
// mma's k-slots 2c, 2c + 1, 2c + 8, 2c + 9 of lane quad c hold dims 4c .. 4c + 3, and the
// queries are stored in that order (slot of dim d below) so that the products pair up.
__device__ __forceinline__ int QuerySlot(int d) {
  const int within = d % 16, quad = within / 4, r = within % 4;
  return d - within + 2 * quad + (r < 2 ? r : 8 + r - 2);
}

template <int kWarps, int kStages, bool kInt8>
__global__ void __launch_bounds__(32 * kWarps) SharedKvKernel(Params p) {
  static_assert(kStages >= 2);
  using S = Shape<kWarps, kStages, kInt8>;
  constexpr int kWidth = S::kWidth, kRow = S::kRow, kTileKeys = S::kTileKeys;
  constexpr int kKvBytes = kInt8 ? 1 : 2;  // bytes of a kv element in global memory
  extern __shared__ __align__(16) unsigned char smem[];
  auto* queries_s = reinterpret_cast<__half*>(smem);
  unsigned char* stages_s = smem + S::kQueryBytes;
  auto* scores_s = reinterpret_cast<float*>(smem + S::kQueryBytes + kStages * S::kStageBytes);
  // (kInt8) this warp's widened values: 16 keys of its 64 dims.
  auto* values_s =
      reinterpret_cast<__half*>(smem + S::kQueryBytes + kStages * S::kStageBytes + S::kScoreBytes) +
      (threadIdx.x / kWarp) * (kWarpValueBytes / 2);
  const int split = static_cast<int>(blockIdx.x), group = static_cast<int>(blockIdx.y);
  const int64_t b = blockIdx.z;
  const int t = static_cast<int>(threadIdx.x), warp = t / kWarp, lane = t % kWarp;
  const int row = lane / 4, quad = lane % 4;  // the mma fragments' row and column pair
  const int64_t key_begin = split * p.keys_per_split;
  const int64_t key_end =
      key_begin + p.keys_per_split < p.kv_len ? key_begin + p.keys_per_split : p.kv_len;
  const int tiles = static_cast<int>((key_end - key_begin + kTileKeys - 1) / kTileKeys);
  const auto* kv = static_cast<const unsigned char*>(p.kv) + b * p.kv_len * kWidth * kKvBytes;
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
  constexpr int kChunks = kWidth * kKvBytes / 16;          // 16-byte chunks per key
  constexpr int kRowBytes = kInt8 ? S::kRowI8 : kRow * 2;  // a shared ring row's bytes
  auto load_tile = [&](int tile) {
    const int64_t first = key_begin + int64_t{tile} * kTileKeys;
    unsigned char* dst = stages_s + (tile % kStages) * S::kStageBytes;
    for (int i = t; tile < tiles && i < kTileKeys * kChunks; i += S::kThreads) {
      const int key = i / kChunks, chunk = i % kChunks;
      const bool valid = first + key < key_end;
      // Keys past the range are zero-filled from a valid address (their scores are masked).
      const unsigned char* src = kv + ((valid ? first + key : key_begin) * kChunks + chunk) * 16;
      if (hinted) {
        mma::CopyAsync16Hinted(dst + key * kRowBytes + chunk * 16, src, valid ? 16 : 0, policy);
      } else {
        mma::CopyAsync16(dst + key * kRowBytes + chunk * 16, src, valid ? 16 : 0);
      }
    }
    mma::CommitAsync();
  };
  for (int tile = 0; tile < kStages - 1; ++tile) load_tile(tile);
  // The queries, scaled, as f16 parts (rows 0-7) and rounding errors (rows 8-15).
  for (int i = t; i < kGroup * kWidth; i += S::kThreads) {
    const int r = i / kWidth, d = i % kWidth;
    const int64_t query = int64_t{group} * kGroup + r;
    // (kInt8: times the channel's scale, so that the scores are those of the widened kv.)
    const float channel_scale = kInt8 ? p.kv_scales[b * kWidth + d] : 1.0f;
    const float x = query < p.queries
                        ? p.q[(b * p.queries + query) * kWidth + d] * p.scale_log2 * channel_scale
                        : 0;
    const __half hi = __float2half_rn(x);
    const int slot = kInt8 ? QuerySlot(d) : d;
    queries_s[r * kRow + slot] = hi;
    queries_s[(r + kGroup) * kRow + slot] = __float2half_rn(x - __half2float(hi));
  }

  float o[8][4] = {};  // dims [64·warp, 64·warp + 64): rows `row` (f16 parts) and `row` + 8
  float m = -INFINITY, l = 0;  // query `row`'s running max (log2 units) and this lane's sum part
  const __half* a_lane = queries_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * kRow + (lane / 16) * 8;
  for (int tile = 0; tile < tiles; ++tile) {
    mma::WaitAsync<kStages - 2>();
    // Tile `tile` is in; every warp is done with tile − 1's buffer and with the scores.
    __syncthreads();
    load_tile(tile + kStages - 1);
    const unsigned char* ring = stages_s + (tile % kStages) * S::kStageBytes;
    const auto* tile_s = reinterpret_cast<const __half*>(ring);  // (f16 kv)

    // Scores of keys [8·n, 8·n + 8) over the whole width, two k-steps per ldmatrix of keys (an
    // i8 kv: a word of four dims per k-step, widened in registers).
    for (int n = warp; n < S::kKeyTiles; n += kWarps) {
      float even[4] = {}, odd[4] = {};
      const __half* b_lane = tile_s + (n * 8 + lane % 8) * kRow + (lane / 8) * 8;
      const auto* words =
          reinterpret_cast<const uint32_t*>(ring + (n * 8 + row) * S::kRowI8 + 4 * quad);
#pragma unroll 4
      for (int k = 0; k < kWidth; k += 32) {
        uint32_t keys[4], q0[4], q1[4];
        if constexpr (kInt8) {
          WidenI8x4(words[k / 4], keys[0], keys[1]);
          WidenI8x4(words[k / 4 + 4], keys[2], keys[3]);
        } else {
          mma::LdMatrix4(keys, b_lane + k);
        }
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
        kInt8 ? values_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * kValueRow + (lane / 16) * 8
              : tile_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * kRow + warp * 64 + (lane / 16) * 8;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      if constexpr (kInt8) {
        // This warp's 64 dims of keys [16k, 16k + 16) widened into its buffer: 64 chunks of 16
        // values, two a lane.
        __syncwarp();  // the lanes are done with the last keys' values
#pragma unroll
        for (int c = lane; c < 64; c += kWarp) {
          const int key = c / 4, part = c % 4;
          const uint4 in = *reinterpret_cast<const uint4*>(ring + (16 * k + key) * S::kRowI8 +
                                                           warp * 64 + 16 * part);
          uint4 lo, hi;
          WidenI8x4(in.x, lo.x, lo.y);
          WidenI8x4(in.y, lo.z, lo.w);
          WidenI8x4(in.z, hi.x, hi.y);
          WidenI8x4(in.w, hi.z, hi.w);
          uint4* to = reinterpret_cast<uint4*>(values_s + key * kValueRow + 16 * part);
          to[0] = lo;
          to[1] = hi;
        }
        __syncwarp();
      }
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
        mma::LdMatrix4Trans(values, kInt8 ? v_lane + n * 8 : v_lane + 16 * k * kRow + n * 8);
        mma::Mma16816(o[n], a, values[0], values[1]);
        mma::Mma16816(o[n + 1], a, values[2], values[3]);
      }
    }
  }

  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);
  const int64_t query = int64_t{group} * kGroup + row;
  const int dim0 = warp * 64 + 2 * quad;
  if constexpr (kInt8) {  // the weighted sums of the integers, times their channels' scales
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 channel =
          *reinterpret_cast<const float2*>(p.kv_scales + b * kWidth + dim0 + n * 8);
      o[n][0] *= channel.x;
      o[n][2] *= channel.x;
      o[n][1] *= channel.y;
      o[n][3] *= channel.y;
    }
  }
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

template <int kWarps, int kStages, bool kInt8>
cudaError_t LaunchWarps(const LaunchContext& ctx, const SharedKvArgs& a, const SharedKvPlan& plan,
                        float* partials, int* counters) {
  using S = Shape<kWarps, kStages, kInt8>;
  static std::once_flag once;
  static cudaError_t attribute = cudaSuccess;
  std::call_once(once, [] {
    attribute = cudaFuncSetAttribute(SharedKvKernel<kWarps, kStages, kInt8>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmemBytes));
  });
  if (attribute != cudaSuccess) return attribute;
  const int groups = static_cast<int>((a.queries + kGroup - 1) / kGroup);
  const Params params{a.q,       a.kv,        a.kv_scales,      a.out,
                      a.out_f16, a.queries,   a.kv_len,         plan.keys_per_split,
                      groups,    plan.splits, plan.retain_rows, a.scale * 1.4426950408889634f,
                      partials,  counters};
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(groups),
                  static_cast<unsigned>(a.batch));
  return Launch(ctx, SharedKvKernel<kWarps, kStages, kInt8>, grid, dim3(S::kThreads), S::kSmemBytes,
                params);
}

template <int kWarps, bool kInt8>
cudaError_t LaunchStages(const LaunchContext& ctx, const SharedKvArgs& a, const SharedKvPlan& plan,
                         float* partials, int* counters) {
  if (plan.stages == 2) return LaunchWarps<kWarps, 2, kInt8>(ctx, a, plan, partials, counters);
  if constexpr (kInt8) {  // (an i8 ring's three stages)
    if (plan.stages == 3) return LaunchWarps<kWarps, 3, true>(ctx, a, plan, partials, counters);
  }
  if (plan.stages != DeepStages(kWarps, kInt8)) return cudaErrorInvalidValue;
  return LaunchWarps<kWarps, DeepStages(kWarps, kInt8), kInt8>(ctx, a, plan, partials, counters);
}

template <int kWarps>
cudaError_t LaunchFor(int warps, const LaunchContext& ctx, const SharedKvArgs& a,
                      const SharedKvPlan& plan, float* partials, int* counters) {
  if constexpr (kWarps > kMaxWarps) {
    return cudaErrorInvalidValue;
  } else {
    if (warps != kWarps) return LaunchFor<kWarps + 1>(warps, ctx, a, plan, partials, counters);
    if (a.kv_scales != nullptr) return LaunchStages<kWarps, true>(ctx, a, plan, partials, counters);
    return LaunchStages<kWarps, false>(ctx, a, plan, partials, counters);
  }
}

#endif  // WAAV_GPU_HAS_MMA

}  // namespace

bool SharedKvAttentionAvailable() { return WAAV_GPU_HAS_MMA != 0; }

int SharedKvMaxWidth(const GpuShape& gpu) {
#if WAAV_GPU_HAS_MMA
  for (int warps = kMaxWarps; warps >= 1; --warps) {
    // (The f16 kernel's block: the i8 one's two i8 stages and one f16 tile are smaller.)
    if (SmemBytes(warps, 2, false) <=
        static_cast<size_t>(std::max(0, gpu.shared_bytes_per_block))) {
      return 64 * warps;
    }
  }
#else
  (void)gpu;
#endif
  return 0;
}

SharedKvPlan PlanSharedKvAttention(const SharedKvArgs& a, const GpuShape& gpu, int64_t max_counters,
                                   int force_splits, bool deep_pipeline, int64_t l2_retain_bytes,
                                   int i8_stages) {
  SharedKvPlan plan;
#if WAAV_GPU_HAS_MMA
  auto aligned = [](const void* ptr, uintptr_t bytes) {
    return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
  };
  if (a.width < 64 || a.width > 64 * kMaxWarps || a.width % 64 != 0 || a.kv_len < 1 ||
      !aligned(a.kv, 16) || !aligned(a.out, 16) || !aligned(a.kv_scales, 8)) {
    return plan;
  }
  const int warps = a.width / 64;
  const bool int8 = a.kv_scales != nullptr;
  // The device's shared memory: the deep pipeline only where its tiles fit (a Hopper), two tiles
  // where those fit, else no kernel.
  const size_t block_limit = static_cast<size_t>(std::max(0, gpu.shared_bytes_per_block));
  const int deep = DeepStages(warps, int8);
  plan.stages = deep_pipeline && SmemBytes(warps, deep, int8) <= block_limit ? deep : 2;
  if (int8 && plan.stages == 2) {
    // An i8 tile is half an f16 one: three stages where two blocks of them fit a multiprocessor
    // (an H100; measured faster than two or four there, session 29), else two; `i8_stages` (2
    // or 3) forces that many where it fits.
    const auto fits = [&](int stages, int blocks) {
      return SmemBytes(warps, stages, true) <= block_limit &&
             blocks * (SmemBytes(warps, stages, true) + 2048) <=
                 static_cast<size_t>(std::max(0, gpu.shared_bytes_per_sm));
    };
    if (i8_stages == 3 ? fits(3, 1) : (i8_stages != 2 && fits(3, 2))) plan.stages = 3;
  }
  const size_t block_bytes = SmemBytes(warps, plan.stages, int8);
  if (block_bytes > block_limit) return plan;
  plan.supported = true;
  const int64_t tile_keys = TileKeys(warps);
  const int64_t tiles = (a.kv_len + tile_keys - 1) / tile_keys;
  const int64_t groups = (a.queries + kGroup - 1) / kGroup;
  const int64_t items = a.batch * groups;
  // Blocks resident per multiprocessor by shared memory (1 KB reserved a block, and the merge's
  // static arrays).
  const int64_t resident =
      std::max<int64_t>(1, gpu.shared_bytes_per_sm / static_cast<int64_t>(block_bytes + 2048));
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
  if (l2_retain_bytes >= 0 && !int8) {  // (no hints for an i8 kv: see the header)
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
  (void)i8_stages;
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
