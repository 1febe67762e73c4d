#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_attention.cuh"

namespace waav::cuda {
namespace {

constexpr int kDim = 64;          // head_dim
constexpr int kMaxThreads = 512;  // per block
constexpr int kUnroll = 4;        // passes whose K and V loads are in flight together
constexpr int kMaxGroups = kMaxThreads / 8;
constexpr int kRecord = kDim + 2;  // a group's (o, m, l)

template <typename KV>
__host__ __device__ constexpr int DimsPerLane() {
  return 16 / static_cast<int>(sizeof(KV));  // 8 (f16) or 4 (f32)
}
template <typename KV>
__host__ __device__ constexpr int LanesPerPair() {
  return kDim / DimsPerLane<KV>();  // 8 (f16) or 16 (f32)
}

// 16 bytes of the cache. kEvictFirst: marked evict-first in L2 (streamed once a step, so that it
// need not push out the step's weights, which the next step reads again) and not kept in L1.
template <bool kEvictFirst>
__device__ __forceinline__ uint4 LoadRow16(const void* p, uint64_t policy) {
#if defined(__CUDA_ARCH__) && !defined(WAAV_HIP)
  if constexpr (kEvictFirst) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
    return v;
  }
#endif
  (void)policy;
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && !defined(WAAV_HIP)
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

template <typename KV, bool kEvictFirst>
__global__ void __launch_bounds__(kMaxThreads)
    DecodeAttentionKernel(AttentionArgs a, int splits, int keys_per_pass, float* partials,
                          int* counters, unsigned long long* error_word) {
  WaitForPreviousKernel();
  AllowNextKernel();
  constexpr int kPer = DimsPerLane<KV>(), kLanes = LanesPerPair<KV>();
  __shared__ float records[kMaxGroups * kRecord];
  __shared__ int last_s;
  const int t = threadIdx.x, heads = a.heads;
  const int groups = heads * keys_per_pass;
  const int g = t / kLanes, sub = t % kLanes;
  const bool active = g < groups;
  const int head = active ? g % heads : 0, slot = active ? g / heads : 0;
  const int64_t b = blockIdx.y, width = int64_t{heads} * kDim;
  const int s = static_cast<int>(blockIdx.x);

  int64_t valid = a.kv_len;
  if (a.kv_lengths != nullptr) {
    valid = a.kv_lengths[b];
    if (valid < 0 || valid > a.kv_len) {
      if (t == 0 && s == 0) {
        ReportDeviceError(error_word, DeviceErrorOp::kAttention, b, static_cast<int32_t>(valid));
      }
      return;
    }
  }
  // This block's keys: the split's share of the row's keys (of its length, not the cache's
  // capacity, so that a self cache filled to position t spreads its t keys over every split).
  const int64_t per_split = (valid + splits - 1) / splits;
  const int64_t kb = s * per_split;
  const int64_t ke = kb + per_split < valid ? kb + per_split : valid;

  const KV* const kv_k = static_cast<const KV*>(sizeof(KV) == 2 ? a.k16 : a.k);
  const KV* const kv_v = static_cast<const KV*>(sizeof(KV) == 2 ? a.v16 : a.v);
  const int64_t lane_offset = b * a.kv_len * width + head * kDim + sub * kPer;
  float q[kPer], o[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    q[i] = a.q[b * width + head * kDim + sub * kPer + i] * a.scale;
    o[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const uint64_t policy = kEvictFirst ? EvictFirstPolicy() : 0;
  // Every thread runs the same passes (the shuffles take whole warps); keys past the range are
  // masked, a group whose keys are all masked keeps its state.
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t base = kb; base < ke; base += int64_t{kUnroll} * keys_per_pass) {
    uint4 kr[kUnroll], vr[kUnroll];
    bool in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + int64_t{u} * keys_per_pass + slot;
      in[u] = active && j < ke;
      const int64_t at = lane_offset + j * width;
      kr[u] = in[u] ? LoadRow16<kEvictFirst>(kv_k + at, policy) : zero;
      vr[u] = in[u] ? LoadRow16<kEvictFirst>(kv_v + at, policy) : zero;
    }
    float sc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kPer];
      WidenRow16<KV>(kr[u], kf);
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc = fmaf(q[i], kf[i], acc);
      sc[u] = acc;
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sc[u] += __shfl_xor_sync(kFullMask, sc[u], off);
    }
    float mn = m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (in[u]) mn = fmaxf(mn, sc[u]);
    }
    if (mn == -INFINITY) continue;  // no key of this group yet (group-uniform)
    const float c = expf(m - mn);   // 0 while m is still -inf
    l *= c;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[i] *= c;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!in[u]) continue;
      const float p = expf(sc[u] - mn);
      l += p;
      float vf[kPer];
      WidenRow16<KV>(vr[u], vf);
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[i] = fmaf(p, vf[i], o[i]);
    }
    m = mn;
  }

  // The groups of each head merged: group records into shared memory, then one thread per
  // (head, dim) of the row.
  if (active) {
    float* rec = records + g * kRecord;
#pragma unroll
    for (int i = 0; i < kPer; ++i) rec[sub * kPer + i] = o[i];
    if (sub == 0) {
      rec[kDim] = m;
      rec[kDim + 1] = l;
    }
  }
  __syncthreads();
  auto merge_groups = [&](int idx, float* m_out, float* l_out) {
    const int h = idx / kDim, d = idx % kDim;
    float m_max = -INFINITY;
    for (int sl = 0; sl < keys_per_pass; ++sl) {
      m_max = fmaxf(m_max, records[(sl * heads + h) * kRecord + kDim]);
    }
    float o_sum = 0.0f, l_sum = 0.0f;
    if (m_max != -INFINITY) {
      for (int sl = 0; sl < keys_per_pass; ++sl) {
        const float* rec = records + (sl * heads + h) * kRecord;
        if (rec[kDim] == -INFINITY) continue;
        const float w = expf(rec[kDim] - m_max);
        o_sum = fmaf(rec[d], w, o_sum);
        l_sum = fmaf(rec[kDim + 1], w, l_sum);
      }
    }
    *m_out = m_max;
    *l_out = l_sum;
    return o_sum;
  };
  if (splits == 1) {
    for (int idx = t; idx < width; idx += blockDim.x) {
      float m_max, l_sum;
      const float o_sum = merge_groups(idx, &m_max, &l_sum);
      a.out[b * width + idx] = l_sum > 0.0f ? o_sum / l_sum : 0.0f;
    }
    return;
  }

  // Partial result of this split ([row][split] records of width o's, then heads (m, l)'s), then
  // the last block of the row merges them.
  const int64_t records_total = int64_t{gridDim.y} * splits;
  float* part_o = partials + (b * splits + s) * width;
  float* part_ml = partials + records_total * width + (b * splits + s) * heads * 2;
  for (int idx = t; idx < width; idx += blockDim.x) {
    float m_max, l_sum;
    part_o[idx] = merge_groups(idx, &m_max, &l_sum);
    if (idx % kDim == 0) {
      part_ml[2 * (idx / kDim)] = m_max;
      part_ml[2 * (idx / kDim) + 1] = l_sum;
    }
  }
  __threadfence();
  __syncthreads();
  if (t == 0) last_s = atomicAdd(&counters[b], 1) == splits - 1;
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  // The splits' (m, l) of every head into shared memory at once, then per head the weight of each
  // split (exp(m - M) / L), then per output the weighted sum of the splits' o, whose loads are
  // independent (one serial chain of loads per output took ~10 us at 16 splits).
  const float* row_o = partials + b * splits * width;
  const float* row_ml = partials + records_total * width + b * splits * heads * 2;
  float* ml_s = records;                           // [split][head] (m, l)
  float* weight_s = records + 2 * splits * heads;  // [split][head]
  for (int i = t; i < 2 * splits * heads; i += blockDim.x) ml_s[i] = __ldcg(row_ml + i);
  __syncthreads();
  for (int h = t; h < heads; h += blockDim.x) {
    float m_max = -INFINITY;
    for (int sp = 0; sp < splits; ++sp) m_max = fmaxf(m_max, ml_s[2 * (sp * heads + h)]);
    float l_sum = 0.0f;
    if (m_max != -INFINITY) {
      for (int sp = 0; sp < splits; ++sp) {
        const float mm = ml_s[2 * (sp * heads + h)];
        if (mm != -INFINITY) l_sum = fmaf(ml_s[2 * (sp * heads + h) + 1], expf(mm - m_max), l_sum);
      }
    }
    for (int sp = 0; sp < splits; ++sp) {
      const float mm = ml_s[2 * (sp * heads + h)];
      weight_s[sp * heads + h] = l_sum > 0.0f && mm != -INFINITY ? expf(mm - m_max) / l_sum : 0.0f;
    }
  }
  __syncthreads();
  for (int idx = t; idx < width; idx += blockDim.x) {
    const int h = idx / kDim;
    float o_sum = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < splits; ++sp) {
      o_sum = fmaf(__ldcg(row_o + sp * width + idx), weight_s[sp * heads + h], o_sum);
    }
    a.out[b * width + idx] = o_sum;
  }
  if (t == 0) counters[b] = 0;
}

}  // namespace

DecodePlan PlanDecodeAttention(const AttentionArgs& a, int sm_count, int64_t max_counters,
                               int blocks_per_sm, int keys_per_pass) {
  DecodePlan plan;
  const bool half = a.kv_half;
  const void* k = half ? a.k16 : a.k;
  const void* v = half ? a.v16 : a.v;
  if (a.q_len != 1 || a.head_dim != kDim || a.half_inputs || a.heads < 1 || a.batch < 1 ||
      a.batch > 65535 || a.kv_len < 1 || k == nullptr || v == nullptr ||
      (reinterpret_cast<uintptr_t>(k) & 15) != 0 || (reinterpret_cast<uintptr_t>(v) & 15) != 0) {
    return plan;
  }
  const int lanes = half ? LanesPerPair<__half>() : LanesPerPair<float>();
  const int64_t pair_threads = int64_t{lanes} * a.heads;  // one key, every head
  if (pair_threads > kMaxThreads) return plan;
  const int most_per_pass = static_cast<int>(kMaxThreads / pair_threads);
  plan.keys_per_pass = keys_per_pass > 0 ? std::min(keys_per_pass, most_per_pass) : most_per_pass;
  plan.threads = static_cast<int>((pair_threads * plan.keys_per_pass + kWarp - 1) / kWarp * kWarp);
  // Enough blocks for ~blocks_per_sm per multiprocessor, each range at least two iterations of
  // kUnroll passes (shorter ones spend more on the merge than they save).
  const int64_t wanted = (std::max(1, blocks_per_sm) * int64_t{sm_count}) / a.batch;
  const int64_t per_iteration = int64_t{kUnroll} * plan.keys_per_pass;
  const int64_t most = std::max<int64_t>(1, a.kv_len / (2 * per_iteration));
  // (The merge keeps 3 floats per split and head in the block's record memory.)
  const int64_t fit = kMaxGroups * kRecord / (3 * int64_t{a.heads});
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min(most, fit));
  plan.supported = true;
  if (splits <= 1 || a.batch > max_counters) return plan;
  plan.splits = static_cast<int>(splits);
  const int64_t width = int64_t{a.heads} * kDim;
  plan.partial_bytes =
      static_cast<size_t>(a.batch * splits) * (width + 2 * a.heads) * sizeof(float);
  plan.counters = a.batch;
  return plan;
}

cudaError_t LaunchDecodeAttention(const LaunchContext& ctx, const AttentionArgs& a,
                                  const DecodePlan& plan, float* partials, int* counters) {
  if (!plan.supported) return cudaErrorInvalidValue;
  if (a.batch == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(a.batch));
  const dim3 block(static_cast<unsigned>(plan.threads));
  auto launch = [&](auto kernel) {
    return Launch(ctx, kernel, grid, block, 0, a, plan.splits, plan.keys_per_pass, partials,
                  counters, ctx.error_word);
  };
  if (a.kv_half) {
    return plan.evict_first ? launch(DecodeAttentionKernel<__half, true>)
                            : launch(DecodeAttentionKernel<__half, false>);
  }
  return plan.evict_first ? launch(DecodeAttentionKernel<float, true>)
                          : launch(DecodeAttentionKernel<float, false>);
}

}  // namespace waav::cuda
