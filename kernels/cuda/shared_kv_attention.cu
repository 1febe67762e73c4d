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
constexpr int kQueryTerms = 3;    // an i8 kv's queries: three i8 terms each (see the prologue)
constexpr int kMaxHoldWarps = 6;  // widths up to 384 hold the queries' terms (512 would spill)

// A block of `warps` warps: 8-key column tiles of the scores, one per warp (two for the last warp
// of an odd count), so tiles of a multiple of 16 keys (the weighted sum's k-step); rows of the
// width plus padding; the queries' 16 rows and the tile's scores beside `stages` tiles. An i8 kv
// (`int8`) lands in a ring of i8 tiles; the scores take its keys as they are (an i8 mma against
// the queries' three i8 terms: 24 rows, then their scales), and the weighted sum widens the
// values in registers.
constexpr int TileKeys(int warps) { return 16 * ((warps + 1) / 2); }
constexpr size_t RowBytes(int warps) { return static_cast<size_t>(64 * warps + kPad) * 2; }
constexpr size_t RowBytesI8(int warps) { return static_cast<size_t>(64 * warps + kPadI8); }
constexpr size_t QueryBytes(int warps, bool int8) {
  return int8 ? kQueryTerms * kGroup * (RowBytesI8(warps) + 4) : 16 * RowBytes(warps);
}
constexpr size_t FixedBytes(int warps, bool int8) {
  return QueryBytes(warps, int8) + static_cast<size_t>(kGroup) * TileKeys(warps) * 4;
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

// Blocks of an i8 kernel a multiprocessor should hold: as many as an H100's shared memory takes
// (1 KB reserved a block and the merge's arrays), as far as 96 registers a thread allow (at 80
// the two-stage kernel spilled). The kernel is latency-bound (session 30's profile at 256 rows:
// 0.44 instructions a cycle per scheduler, the largest share of stalls, 39%, waiting for shared
// memory), so resident warps are what it runs on; the f16 kernel's two blocks need no bound.
constexpr int MinBlocks(int warps, int stages, bool int8) {
  const int by_shared = static_cast<int>(228 * 1024 / (SmemBytes(warps, stages, int8) + 2048));
  const int by_registers = 65536 / (96 * 32 * warps);
  const int blocks = by_shared < by_registers ? by_shared : by_registers;
  return !int8 || blocks < 1 ? 1 : blocks;
}

template <int kWarps, int kStages, bool kInt8>
struct Shape {
  static constexpr int kWidth = 64 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTileKeys = TileKeys(kWarps);
  static constexpr int kKeyTiles = kTileKeys / 8;
  static constexpr int kRow = kWidth + kPad;      // halves per shared f16 row
  static constexpr int kRowI8 = kWidth + kPadI8;  // bytes per shared i8 row
  static constexpr size_t kQueryBytes = QueryBytes(kWarps, kInt8);
  static_assert(kQueryBytes % 16 == 0);
  static constexpr size_t kStageBytes = StageBytes(kWarps, kInt8);
  static constexpr size_t kScoreBytes = size_t{kGroup} * kTileKeys * 4;
  // kStages tiles in shared memory, kStages − 1 of them in flight while one is computed on.
  static constexpr size_t kSmemBytes = kQueryBytes + kStages * kStageBytes + kScoreBytes;
  static_assert(kSmemBytes == SmemBytes(kWarps, kStages, kInt8));
  static constexpr int kMinBlocks = MinBlocks(kWarps, kStages, kInt8);
};

struct Params {
  const float* q;
  const void* kv;          // f16, or i8 (kInt8)
  const float* kv_scales;  // kInt8: [B, width], kv's value = kv · kv_scales[channel]
  void* out;               // f32, or f16 where out_f16 (rounded from the f32 result)
  bool out_f16;
  int64_t queries, kv_len, keys_per_split;
  int groups, splits;
  float scale_log2;  // scale · log2(e): the softmax runs on exp2
  float* partials;   // per (row, group, split): o [8][width], then m [8] and l [8]
  int* counters;     // per (row, group)
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

// An i8 kv's scores read 16 dims of a key at once (lane quad c: dims 16c .. 16c + 15 of each 64)
// for two k-steps of the i8 mma: words 0 and 1 are the first step's k-slots 4c .. 4c + 3 and
// 16 + 4c .., words 2 and 3 the second's. The queries' terms are stored in that order (the byte
// of dim d below) so that the products pair up.
__device__ __forceinline__ int QueryByteI8(int d) {
  const int within = d % 64, quad = within / 16, r = within % 16;
  const int step = r / 8, high = (r % 8) / 4, i = r % 4;
  return d - within + 32 * step + 16 * high + 4 * quad + i;
}

// The larger of a and b, NaN if either is (fmaxf would drop it).
__device__ __forceinline__ float MaxKeepingNan(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

// kHold (an i8 kv, one key range a row, the grid within two blocks a multiprocessor): the
// queries' first two terms stay in registers for the whole range (4 · D / 16 of them) instead of
// being loaded from shared memory every tile, at two blocks a multiprocessor.
template <int kWarps, int kStages, bool kInt8, bool kHold = false>
__global__ void __launch_bounds__(32 * kWarps,
                                  (kHold ? 2 : Shape<kWarps, kStages, kInt8>::kMinBlocks))
    SharedKvKernel(Params p) {
  static_assert(kInt8 || !kHold);
  static_assert(kStages >= 2);
  using S = Shape<kWarps, kStages, kInt8>;
  constexpr int kWidth = S::kWidth, kRow = S::kRow, kTileKeys = S::kTileKeys;
  constexpr int kKvBytes = kInt8 ? 1 : 2;  // bytes of a kv element in global memory
  extern __shared__ __align__(16) unsigned char smem[];
  auto* queries_s = reinterpret_cast<__half*>(smem);
  unsigned char* stages_s = smem + S::kQueryBytes;
  auto* scores_s = reinterpret_cast<float*>(smem + S::kQueryBytes + kStages * S::kStageBytes);
  const int split = static_cast<int>(blockIdx.x), group = static_cast<int>(blockIdx.y);
  const int64_t b = blockIdx.z;
  const int t = static_cast<int>(threadIdx.x), warp = t / kWarp, lane = t % kWarp;
  const int row = lane / 4, quad = lane % 4;  // the mma fragments' row and column pair
  const int64_t key_begin = split * p.keys_per_split;
  const int64_t key_end =
      key_begin + p.keys_per_split < p.kv_len ? key_begin + p.keys_per_split : p.kv_len;
  const int tiles = static_cast<int>((key_end - key_begin + kTileKeys - 1) / kTileKeys);
  const auto* kv = static_cast<const unsigned char*>(p.kv) + b * p.kv_len * kWidth * kKvBytes;
  WaitForPreviousKernel();
  // One commit group per tile index, empty past the last tile, so that waiting for all but the
  // newest kStages − 2 groups always means the tile about to be computed on is in.
  constexpr int kChunks = kWidth * kKvBytes / 16;          // 16-byte chunks per key
  constexpr int kRowBytes = kInt8 ? S::kRowI8 : kRow * 2;  // a shared ring row's bytes
  // The block copies whole keys a pass (8 of an i8 kv, 4 of f16): each thread the same chunk of
  // one key of each pass, so its addresses are fixed but for the tile's offset.
  constexpr int kKeysPerPass = S::kThreads / kChunks;
  static_assert(S::kThreads % kChunks == 0 && kTileKeys % kKeysPerPass == 0);
  const int copy_key = t / kChunks, copy_chunk = t % kChunks;
  const int copy_dst = copy_key * kRowBytes + copy_chunk * 16;
  const int64_t copy_keys = key_end - key_begin - copy_key;  // this thread's keys in the range
  // Keys past the range: zero-filled from a valid address; their scores are masked.
  const unsigned char* copy_fallback = kv + (key_begin * kChunks + copy_chunk) * 16;
  auto load_tile = [&](int tile) {
    if (tile < tiles) {
      const int64_t first = int64_t{tile} * kTileKeys;  // within the range
      unsigned char* dst = stages_s + (tile % kStages) * S::kStageBytes + copy_dst;
      const unsigned char* src = copy_fallback + (first + copy_key) * kChunks * 16;
      const auto from = [&](int pass) {
        return first + pass * kKeysPerPass < copy_keys ? src + pass * kKeysPerPass * kChunks * 16
                                                       : nullptr;
      };
#pragma unroll
      for (int pass = 0; pass < kTileKeys / kKeysPerPass; ++pass) {
        const unsigned char* at = from(pass);
        mma::CopyAsync16(dst + pass * kKeysPerPass * kRowBytes, at != nullptr ? at : copy_fallback,
                         at != nullptr ? 16 : 0);
      }
    }
    mma::CommitAsync();
  };
  for (int tile = 0; tile < kStages - 1; ++tile) load_tile(tile);
  // An i8 kv's queries: three i8 terms of each row (rows r, 8 + r, 16 + r) and their scales.
  auto* query_terms_s = reinterpret_cast<signed char*>(smem);
  auto* term_scales_s =
      reinterpret_cast<float*>(smem + kQueryTerms * kGroup * static_cast<size_t>(S::kRowI8));
  if constexpr (kInt8) {
    // Each query times its channels' scales (so that its scores are those of the integers) and
    // the softmax's scale, x ≈ s1·t1 + s2·t2 + s3·t3 with s1 = max|x| / 127, s2 = s1 / 254,
    // s3 = s2 / 254 (each term rounds the last one's residual, within half its step): ~2e-7
    // relative of the f32 queries' attention, where two terms would give ~4e-5. Every thread
    // holds 16 of the 8 rows' x (width = 2 · threads: elements j and j + 1 of row j / 2), the
    // rows' maxima go through shared memory (the scores' buffer, unused yet), and each thread
    // writes its elements' terms. A NaN anywhere makes its row's scales NaN (and its output).
    static_assert(kWidth == 2 * S::kThreads && kGroup * kWidth / S::kThreads == 16);
    static_assert((kWarps + kQueryTerms) * kGroup * 4 <= S::kScoreBytes);
    float x[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int r = j / 2, d = t + S::kThreads * (j % 2);
      const int64_t query = int64_t{group} * kGroup + r;
      x[j] = query < p.queries ? p.q[(b * p.queries + query) * kWidth + d] * p.scale_log2 *
                                     p.kv_scales[b * kWidth + d]
                               : 0.0f;
    }
    float* warp_peaks_s = scores_s;                  // [kWarps][kGroup]
    float* inverses_s = scores_s + kWarps * kGroup;  // [kQueryTerms][kGroup]
#pragma unroll
    for (int r = 0; r < kGroup; ++r) {
      float peak = MaxKeepingNan(fabsf(x[2 * r]), fabsf(x[2 * r + 1]));
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        peak = MaxKeepingNan(peak, __shfl_xor_sync(kFullMask, peak, offset));
      }
      if (lane == 0) warp_peaks_s[warp * kGroup + r] = peak;
    }
    __syncthreads();
    if (t < kGroup) {
      float peak = 0;
      for (int w = 0; w < kWarps; ++w) peak = MaxKeepingNan(peak, warp_peaks_s[w * kGroup + t]);
      float step = peak / 127.0f;
#pragma unroll
      for (int term = 0; term < kQueryTerms; ++term) {
        term_scales_s[term * kGroup + t] = step;
        inverses_s[term * kGroup + t] = step > 0.0f && step < INFINITY ? 1.0f / step : 0.0f;
        step /= 254.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int r = j / 2, d = t + S::kThreads * (j % 2);
      const int at = r * S::kRowI8 + QueryByteI8(d);
#pragma unroll
      for (int term = 0; term < kQueryTerms; ++term) {
        const float level =
            fminf(fmaxf(rintf(x[j] * inverses_s[term * kGroup + r]), -127.0f), 127.0f);
        x[j] -= level * term_scales_s[term * kGroup + r];
        query_terms_s[at + term * kGroup * S::kRowI8] = static_cast<signed char>(level);
      }
    }
  } else {
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
  }
  // (kInt8) this lane's row's term scales (written before the last barrier); the lanes'
  // ldmatrix rows of terms 1-2 and of term 3.
  float term_scale[kQueryTerms] = {};
  if constexpr (kInt8) {
#pragma unroll
    for (int term = 0; term < kQueryTerms; ++term) {
      term_scale[term] = term_scales_s[term * kGroup + row];
    }
  }
  const signed char* terms12_lane =
      query_terms_s + ((lane % 8) + 8 * ((lane / 8) % 2)) * S::kRowI8 + 16 * (lane / 16);
  const signed char* term3_lane = query_terms_s + (16 + lane % 8) * S::kRowI8 + 16 * (lane / 8);
  uint32_t held_terms[kHold ? kWarps : 1][2][4];  // (kHold) terms 1-2 of each 64 dims' k-steps
  if constexpr (kHold) {
    __syncthreads();  // every thread's terms are written (the tiles' barrier comes later)
#pragma unroll
    for (int blk = 0; blk < kWarps; ++blk) {
      mma::LdMatrix4(held_terms[blk][0], terms12_lane + 64 * blk);
      mma::LdMatrix4(held_terms[blk][1], terms12_lane + 64 * blk + 32);
    }
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

    // Scores of keys [8·n, 8·n + 8) over the whole width: f16, two k-steps per ldmatrix of
    // keys; i8, the keys' 16 dims a lane and 64 a warp per load, against the queries' terms.
    for (int n = warp; n < S::kKeyTiles; n += kWarps) {
      float score0, score1;  // this lane's keys 2·quad and 2·quad + 1 of the 8, query `row`
      if constexpr (kInt8) {
        int terms12[2][4] = {}, term3[2][4] = {};  // (k-step of the 64 dims) two chains each
        const unsigned char* keys_lane = ring + (n * 8 + row) * S::kRowI8 + 16 * quad;
        if constexpr (kHold) {
#pragma unroll
          for (int blk = 0; blk < kWarps; ++blk) {
            const uint4 keys = *reinterpret_cast<const uint4*>(keys_lane + 64 * blk);
            uint32_t third[4];
            mma::LdMatrix4(third, term3_lane + 64 * blk);
            const uint32_t third_first[4] = {third[0], 0, third[1], 0};
            const uint32_t third_second[4] = {third[2], 0, third[3], 0};
            mma::Imma16832(terms12[0], held_terms[blk][0], keys.x, keys.y);
            mma::Imma16832(terms12[1], held_terms[blk][1], keys.z, keys.w);
            mma::Imma16832(term3[0], third_first, keys.x, keys.y);
            mma::Imma16832(term3[1], third_second, keys.z, keys.w);
          }
        }
#pragma unroll 2
        for (int k = 0; k < (kHold ? 0 : kWidth); k += 64) {
          const uint4 keys = *reinterpret_cast<const uint4*>(keys_lane + k);
          uint32_t first[4], second[4], third[4];
          mma::LdMatrix4(first, terms12_lane + k);
          mma::LdMatrix4(second, terms12_lane + k + 32);
          mma::LdMatrix4(third, term3_lane + k);  // term 3's rows 0-7 of both k-steps
          const uint32_t third_first[4] = {third[0], 0, third[1], 0};
          const uint32_t third_second[4] = {third[2], 0, third[3], 0};
          mma::Imma16832(terms12[0], first, keys.x, keys.y);
          mma::Imma16832(terms12[1], second, keys.z, keys.w);
          mma::Imma16832(term3[0], third_first, keys.x, keys.y);
          mma::Imma16832(term3[1], third_second, keys.z, keys.w);
        }
        const auto sum = [&](int c) {  // (exact in f32: |terms| < 2^24 up to width 1024)
          return term_scale[0] * static_cast<float>(terms12[0][c] + terms12[1][c]) +
                 term_scale[1] * static_cast<float>(terms12[0][c + 2] + terms12[1][c + 2]) +
                 term_scale[2] * static_cast<float>(term3[0][c] + term3[1][c]);
        };
        score0 = sum(0);
        score1 = sum(1);
      } else {
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
        score0 = even[0] + even[2] + odd[0] + odd[2];
        score1 = even[1] + even[3] + odd[1] + odd[3];
      }
      const int tile_key = n * 8 + 2 * quad;
      const int64_t key = key_begin + int64_t{tile} * kTileKeys + tile_key;
      float2 s;
      s.x = key < key_end ? score0 : -INFINITY;
      s.y = key + 1 < key_end ? score1 : -INFINITY;
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
    // (kInt8) this lane's 8 dims of the tile's keys 2·quad, 2·quad + 1, 2·quad + 8, 2·quad + 9.
    const unsigned char* i8_values_lane = ring + 2 * quad * S::kRowI8 + warp * 64 + 8 * row;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      uint32_t values_i8[8][2];  // (kInt8) the mma's b0 and b1 of each n-tile
      if constexpr (kInt8) {
        // The mma's column c of n-tile j is dim 64·warp + 8c + j, so that a lane (column
        // row = lane / 4) needs 8 consecutive dims of its 4 keys: two words each, whose bytes of
        // keys 2·quad and 2·quad + 1 (b0), 2·quad + 8 and 2·quad + 9 (b1) are interleaved and
        // widened in registers.
        const unsigned char* at = i8_values_lane + 16 * k * S::kRowI8;
        const uint2 key0 = *reinterpret_cast<const uint2*>(at);
        const uint2 key1 = *reinterpret_cast<const uint2*>(at + S::kRowI8);
        const uint2 key8 = *reinterpret_cast<const uint2*>(at + 8 * S::kRowI8);
        const uint2 key9 = *reinterpret_cast<const uint2*>(at + 9 * S::kRowI8);
        const auto widen_pair = [&](uint32_t first, uint32_t second, int b, int dim) {
          // dims dim .. dim + 3 of two keys: bytes (first_d, second_d) side by side, widened
          WidenI8x4(__byte_perm(first, second, 0x5140), values_i8[dim][b], values_i8[dim + 1][b]);
          WidenI8x4(__byte_perm(first, second, 0x7362), values_i8[dim + 2][b],
                    values_i8[dim + 3][b]);
        };
        widen_pair(key0.x, key1.x, 0, 0);
        widen_pair(key0.y, key1.y, 0, 4);
        widen_pair(key8.x, key9.x, 1, 0);
        widen_pair(key8.y, key9.y, 1, 4);
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
      if constexpr (kInt8) {
#pragma unroll
        for (int n = 0; n < 8; ++n) mma::Mma16816(o[n], a, values_i8[n][0], values_i8[n][1]);
      } else {
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          uint32_t values[4];
          mma::LdMatrix4Trans(values, v_lane + 16 * k * kRow + n * 8);
          mma::Mma16816(o[n], a, values[0], values[1]);
          mma::Mma16816(o[n + 1], a, values[2], values[3]);
        }
      }
    }
  }

  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);
  const int64_t query = int64_t{group} * kGroup + row;
  // This lane's 16 sums of query `row` (each the f16 parts' row plus the errors' row) as 8 pairs
  // of adjacent dims: f16 kv, pair n is the mma's columns 2·quad, 2·quad + 1 of n-tile n (dims
  // 64·warp + 8n + 2·quad); i8 kv, whose column c of n-tile j was dim 64·warp + 8c + j, the
  // lane's dims are the 16 from 64·warp + 16·quad, pair n the n-th two of them.
  float2 sums[8];
  const auto pair_dim = [&](int n) {
    return kInt8 ? warp * 64 + 16 * quad + 2 * n : warp * 64 + 8 * n + 2 * quad;
  };
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    if constexpr (kInt8) {
      const int j = 2 * (n % 4), c = n / 4;
      sums[n] = make_float2(o[j][c] + o[j][c + 2], o[j + 1][c] + o[j + 1][c + 2]);
      // The weighted sums of the integers, times their channels' scales.
      const float2 channel =
          *reinterpret_cast<const float2*>(p.kv_scales + b * kWidth + pair_dim(n));
      sums[n].x *= channel.x;
      sums[n].y *= channel.y;
    } else {
      sums[n] = make_float2(o[n][0] + o[n][2], o[n][1] + o[n][3]);
    }
  }
  if (p.splits == 1) {
    if (query < p.queries) {
      const int64_t at = (b * p.queries + query) * kWidth;
      const float inverse = 1.0f / l;
      if constexpr (kInt8) {
        // 16 consecutive dims: 16-byte stores (f32) or 8-byte ones (f16), by intrinsics (plain
        // vector stores through these pointers became 4-byte ones).
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          const float4 v = make_float4(sums[n].x * inverse, sums[n].y * inverse,
                                       sums[n + 1].x * inverse, sums[n + 1].y * inverse);
          if (p.out_f16) {
            const __half2 first = __floats2half2_rn(v.x, v.y);
            const __half2 second = __floats2half2_rn(v.z, v.w);
            __stwb(reinterpret_cast<uint2*>(static_cast<__half*>(p.out) + at + pair_dim(n)),
                   make_uint2(HalfBits(first), HalfBits(second)));
          } else {
            __stwb(reinterpret_cast<float4*>(static_cast<float*>(p.out) + at + pair_dim(n)), v);
          }
        }
      } else {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float2 v = make_float2(sums[n].x * inverse, sums[n].y * inverse);
          if (p.out_f16) {
            *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + at + pair_dim(n)) =
                __float22half2_rn(v);
          } else {
            __stwb(reinterpret_cast<float2*>(static_cast<float*>(p.out) + at + pair_dim(n)), v);
          }
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
  for (int n = 0; n < 8; n += kInt8 ? 2 : 1) {
    if constexpr (kInt8) {  // (an intrinsic: see the output's stores)
      __stcg(reinterpret_cast<float4*>(part + row * kWidth + pair_dim(n)),
             make_float4(sums[n].x, sums[n].y, sums[n + 1].x, sums[n + 1].y));
    } else {
      __stcg(reinterpret_cast<float2*>(part + row * kWidth + pair_dim(n)), sums[n]);
    }
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
    if (p.out_f16) {  // (intrinsics: plain vector stores here became 4-byte ones)
      __stwb(reinterpret_cast<uint2*>(static_cast<__half*>(p.out) + at),
             make_uint2(HalfBits(__floats2half2_rn(acc.x, acc.y)),
                        HalfBits(__floats2half2_rn(acc.z, acc.w))));
    } else {
      __stwb(reinterpret_cast<float4*>(static_cast<float*>(p.out) + at), acc);
    }
  }
  if (t == 0) *counter = 0;
}

template <int kWarps, int kStages, bool kInt8, bool kHold = false>
cudaError_t LaunchWarps(const LaunchContext& ctx, const SharedKvArgs& a, const SharedKvPlan& plan,
                        float* partials, int* counters) {
  using S = Shape<kWarps, kStages, kInt8>;
  static std::once_flag once;
  static cudaError_t attribute = cudaSuccess;
  std::call_once(once, [] {
    attribute = cudaFuncSetAttribute(SharedKvKernel<kWarps, kStages, kInt8, kHold>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmemBytes));
  });
  if (attribute != cudaSuccess) return attribute;
  const int groups = static_cast<int>((a.queries + kGroup - 1) / kGroup);
  const Params params{a.q,
                      a.kv,
                      a.kv_scales,
                      a.out,
                      a.out_f16,
                      a.queries,
                      a.kv_len,
                      plan.keys_per_split,
                      groups,
                      plan.splits,
                      a.scale * 1.4426950408889634f,
                      partials,
                      counters};
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(groups),
                  static_cast<unsigned>(a.batch));
  auto* kernel = SharedKvKernel<kWarps, kStages, kInt8, kHold>;
  if (plan.retain_rows <= 0)
    return Launch(ctx, kernel, grid, dim3(S::kThreads), S::kSmemBytes, params);
  // The L2 hints: rows [0, retain_rows) of kv as an access-policy window of the launch, its lines
  // persisting (in the L2 set aside) and the rest normal. (In-kernel cache-policy copies were
  // miscompiled: ptxas predicated the policy's move into a uniform register on a condition that
  // differed across a warp, an illegal instruction on an H100, sessions 29 and 30.)
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(S::kThreads);
  config.dynamicSmemBytes = S::kSmemBytes;
  config.stream = ctx.stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeAccessPolicyWindow;
  attributes[0].val.accessPolicyWindow.base_ptr = const_cast<void*>(a.kv);
  attributes[0].val.accessPolicyWindow.num_bytes =
      static_cast<size_t>(plan.retain_rows * a.kv_len * a.width * (a.kv_scales != nullptr ? 1 : 2));
  attributes[0].val.accessPolicyWindow.hitRatio = 1.0f;
  attributes[0].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  attributes[0].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  config.attrs = attributes;
  config.numAttrs = 1;
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (ctx.pdl && blocks <= static_cast<uint64_t>(ctx.pdl_max_blocks_per_sm) *
                               static_cast<uint64_t>(ctx.sm_count)) {  // as Launch (common.cuh)
    attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[1].val.programmaticStreamSerializationAllowed = 1;
    config.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&config, kernel, params);
}

template <int kWarps, bool kInt8>
cudaError_t LaunchStages(const LaunchContext& ctx, const SharedKvArgs& a, const SharedKvPlan& plan,
                         float* partials, int* counters) {
  if (plan.stages == 2) {
    if constexpr (kInt8 && kWarps <= kMaxHoldWarps) {
      if (plan.hold_queries) {
        return LaunchWarps<kWarps, 2, true, true>(ctx, a, plan, partials, counters);
      }
    }
    return LaunchWarps<kWarps, 2, kInt8>(ctx, a, plan, partials, counters);
  }
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
  // An i8 kv: two stages unless `i8_stages` is 3 and three fit (session 29's kernel ran faster
  // in three where two blocks of them fit; session 30's, three blocks a multiprocessor by its
  // launch bound either way, ran faster in two at 16 to 256 rows on an H100).
  if (int8 && plan.stages == 2 && i8_stages == 3 && SmemBytes(warps, 3, true) <= block_limit) {
    plan.stages = 3;
  }
  const size_t block_bytes = SmemBytes(warps, plan.stages, int8);
  if (block_bytes > block_limit) return plan;
  plan.supported = true;
  const int64_t tile_keys = TileKeys(warps);
  const int64_t tiles = (a.kv_len + tile_keys - 1) / tile_keys;
  const int64_t groups = (a.queries + kGroup - 1) / kGroup;
  const int64_t items = a.batch * groups;
  // Blocks resident per multiprocessor by shared memory (1 KB reserved a block, and the merge's
  // static arrays), and (an i8 kv) by the registers its launch bound leaves them.
  const int64_t resident = std::max<int64_t>(
      1, std::min<int64_t>(gpu.shared_bytes_per_sm / static_cast<int64_t>(block_bytes + 2048),
                           int8 ? MinBlocks(warps, plan.stages, true) : INT64_MAX));
  int64_t splits = items > 0 ? resident * gpu.sm_count / items : 1;
  if (force_splits > 0) splits = force_splits;
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(tiles, kMaxSplits));
  if (splits > 1 && items > max_counters) splits = 1;
  plan.keys_per_split = (tiles + splits - 1) / splits * tile_keys;
  plan.splits = static_cast<int>((a.kv_len + plan.keys_per_split - 1) / plan.keys_per_split);
  // An i8 kv whose blocks (one key range a row) fit two a multiprocessor: the queries' terms held
  // in registers, two blocks resident instead of three.
  plan.hold_queries = int8 && warps <= kMaxHoldWarps && plan.stages == 2 && plan.splits == 1 &&
                      items <= 2 * gpu.sm_count &&
                      2 * static_cast<int64_t>(block_bytes + 2048) <= gpu.shared_bytes_per_sm;
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
