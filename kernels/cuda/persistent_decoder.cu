// The persistent decoder step (see persistent_decoder.cuh for the phases). One block of 512
// threads per multiprocessor, all co-resident (cooperative launch); phases are separated by a
// grid barrier on one growing arrival counter with GPU-scope release/acquire.
//
// Work split:
//  * GEMV phases: output columns go to (warp, lane group) slots across the whole grid; a column
//    of K = 384 is 16 lanes x 3 chunks of 8 f16 weights (two columns per warp), a column of
//    K = 1536 is 32 lanes x 6 chunks. The inputs (LayerNorm'ed rows, attention output or FFN
//    hidden of all B rows) sit in shared memory, recomputed by every block. The first chunks of
//    a warp's weights are loaded into registers between the halves of the barrier before it.
//  * Block attention (default): each (row, head)'s keys split into chunks, about one per block
//    (ChunkPlan); a block copies its chunk's K/V tile (up to 256 f16 / 128 f32 keys) into shared
//    memory with cp.async before the barrier (self: the step's own row re-read after it), scores
//    the keys 8 lanes per key, takes the softmax over the tile and P·V over 16 warps, and writes
//    one partial (o, m, l); the next phase's GEMV blocks copy all partials at once and merge
//    them. Fused self-attention: one chunk per (row, head) that applies its W_o slice itself.
//  * First version (knob): items (row, head, `split` keys) go to warps, one key per lane, merged
//    by the last warp of each (row, head) to finish (arrival counter).
//  * Fused FFN: block b owns hidden units [12 b, 12 b + 12): FFN1 + GELU of those, then its
//    share of FFN2 for all 384 outputs, added atomically into a zeroed second residual buffer.
//  * Logits: the tied embedding as a GEMV over all warps; each lane group keeps a running
//    max / argmax / Σexp of its row over the columns it computed (suppressed tokens skipped);
//    blocks merge theirs and the last block to finish reduces the blocks' partials.
#include <algorithm>
#include <climits>

#include "kernels/cuda/cluster_decoder.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/persistent_decoder.cuh"
#include "kernels/cuda/persistent_decoder_attention.cuh"
#include "kernels/cuda/persistent_decoder_common.cuh"

#if defined(WAAV_HIP) && !defined(__grid_constant__)
#define __grid_constant__
#endif

namespace waav::cuda {

using namespace persistent_detail;  // NOLINT(google-build-using-namespace): its own parts

namespace {

// ---- The kernel -------------------------------------------------------------------------------
template <int MaxB, typename Cross>
__global__ void __launch_bounds__(kThreads, 1)
    PersistentDecoderKernel(const __grid_constant__ PersistentDecoderParams p, Layout lay,
                            int max_splits) {
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);  // [MaxB][kFf]
  // Block attention: the K/V stage (kStageBytes) and the partials' stage (MaxChunks records).
  char* stage = reinterpret_cast<char*>(xs + MaxB * kFf);
  float* pstage = reinterpret_cast<float*>(stage + kStageBytes);
  __shared__ Rows rows;
  __shared__ Best warp_best[kWarps][MaxB];
  __shared__ bool last_block;
  __shared__ float merge_weights[kWarps * kMaxSplits];
  __shared__ ChunkPlan self_plan, cross_plan;
  __shared__ AttentionShared att_shared;
  __shared__ __align__(16) float ffn_hidden[MaxB * kMaxFfnUnits];
  unsigned target = 0;  // barrier arrivals awaited (thread 0)

  float* const xbuf[2] = {p.workspace + lay.x, p.workspace + lay.x2};
  float* x = xbuf[0];  // the residual stream (the fused FFN alternates between the two)
  float* q = p.workspace + lay.q;
  float* att = p.workspace + lay.att;
  float* hidden = p.workspace + lay.hidden;
  float* partials = p.workspace + lay.partials;
  float* stats = p.workspace + lay.stats;

  // Rows and their index values, checked by every block alike (block 0 reports).
  if (threadIdx.x == 0) rows.batch = p.batch;
  if (threadIdx.x < MaxB) {
    const int r = threadIdx.x;
    if (r < p.batch) {
      const int token = p.tokens[r], position = p.positions[r], length = p.lengths[r];
      const bool token_ok = token >= 0 && token < p.vocab;
      const bool position_ok = position >= 0 && position < p.text_ctx;
      const bool length_ok = length >= 1 && length <= p.text_ctx;
      if (blockIdx.x == 0) {
        if (!token_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kEmbed, r, token);
        if (!position_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kWriteRows, r, position);
        if (!length_ok) ReportDeviceError(p.error_word, DeviceErrorOp::kAttention, r, length);
      }
      rows.ok[r] = token_ok && position_ok && length_ok;
      rows.token[r] = token_ok ? token : 0;
      rows.position[r] = position_ok ? position : 0;
      rows.length[r] = length_ok ? length : 1;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int cross_lengths[kPersistentMaxBatch];
    for (int r = 0; r < kPersistentMaxBatch; ++r) cross_lengths[r] = p.audio_ctx;
    const bool one_chunk = p.fuse_self_out && p.block_attention &&
                           p.profile_mode != kProfileNoAttention &&
                           static_cast<int>(gridDim.x) >= kH * p.batch;
    MakePlan(rows.length, p.batch, gridDim.x, one_chunk ? (1 << 20) : p.self_split_keys, self_plan);
    MakePlan(cross_lengths, p.batch, gridDim.x, p.cross_split_keys, cross_plan);
  }
  const size_t cross_bytes =
      static_cast<size_t>(p.batch) * p.audio_ctx * kD * (p.cross_f16 ? 2 : 4);
  if (p.prefetch) {
    PrefetchLayer(p.layers[0]);
    PrefetchShare(p.cross_k[0], cross_bytes);
    PrefetchShare(p.cross_v[0], cross_bytes);
  }
  __syncthreads();
  if (p.profile_mode == kProfileBarriersOnly) {
    for (int i = 0; i < 8 * p.n_layers + 1; ++i) GridSync(p.sync, target);
    FinishLaunch(p.sync, &last_block);
    return;
  }
  const bool attention = p.profile_mode != kProfileNoAttention;
  const bool blocks_att = p.block_attention;
  const bool tiles_early = blocks_att && attention && p.prefetch_kv_tiles;
  // Blocks with columns of a 384-column GEMV (the others skip its input).
  const bool has_d_cols = blockIdx.x * kWarps * Geom<kD>::kCols < kD;
  const bool split = p.split_barrier;
  // Fused FFN: block b owns hidden units [b·U, b·U + U).
  const int ffn_units = ((kFf + static_cast<int>(gridDim.x) - 1) / gridDim.x + 3) / 4 * 4;
  const bool fuse_ffn = p.fuse_ffn && ffn_units <= kMaxFfnUnits;
  // Self-attention + output projection in one phase (one chunk per (row, head)).
  const bool fuse_self =
      p.fuse_self_out && blocks_att && attention && static_cast<int>(gridDim.x) >= kH * p.batch;

  for (int layer = 0; layer < p.n_layers; ++layer) {
    const PersistentDecoderLayer& w = p.layers[layer];
    x = fuse_ffn ? xbuf[layer & 1] : xbuf[0];
    float* const x_next = xbuf[(layer + 1) & 1];  // the fused FFN's output (zeroed below)
    // -- LN1 + QKV, K and V appended to the self caches.
    {
      if (layer > 0) GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.qkv_w, w.qkv_b, 3 * kD, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln1_g, w.ln1_b);
      if (tiles_early) {
        PrefetchFirstTile<float>(self_plan, rows.batch, rows.position, p.self_k[layer],
                                 p.self_v[layer], p.text_ctx, true, stage);
      }
      if (fuse_self) {
        PrefetchOutSlice(self_plan, rows.batch, w.out_w, reinterpret_cast<char*>(pstage));
      }
      if (layer > 0) GridWait(p.sync, target, split);
      if (p.prefetch) {
        if (layer + 1 < p.n_layers) PrefetchLayer(p.layers[layer + 1]);
        if (layer > 0) {
          PrefetchShare(p.cross_k[layer], cross_bytes);
          PrefetchShare(p.cross_v[layer], cross_bytes);
        }
        if (layer == p.logits_prefetch_layer) {
          PrefetchShare(p.token_embedding, static_cast<size_t>(p.vocab) * kD * 2);
        }
      }
      if (fuse_ffn && blockIdx.x == gridDim.x - 1) {
        // Last read as the residual stream in the previous layer (before the barrier above).
        for (int i = threadIdx.x; i < rows.batch * kD; i += kThreads) x_next[i] = 0.0f;
      }
      NormRows<MaxB>(p, rows, x, norm, layer == 0, xs);
      float* kc = p.self_k[layer];
      float* vc = p.self_v[layer];
      Gemv<kD, MaxB>(w.qkv_w, w.qkv_b, 3 * kD, xs, first, [&](int r, int col, float acc) {
        if (r >= rows.batch) return;
        const float value = acc;
        const int part = col / kD, c = col % kD;
        if (part == 0) {
          q[r * kD + c] = value;
        } else if (rows.ok[r]) {
          float* cache = part == 1 ? kc : vc;
          cache[(static_cast<size_t>(r) * p.text_ctx + rows.position[r]) * kD + c] = value;
        }
      });
    }
    // -- Self-attention over keys [0, length).
    GridSync(p.sync, target);
    if (fuse_self) {
      FusedOut fused;
      fused.w = reinterpret_cast<const char*>(pstage);
      fused.bias = w.out_b;
      fused.x = x;
      BlockAttentionPhase<MaxB, float>(p, rows, self_plan, p.self_k[layer], p.self_v[layer],
                                       p.text_ctx, true, tiles_early, q, partials, xs, stage,
                                       att_shared, fused);
    } else if (attention && blocks_att) {
      BlockAttentionPhase<MaxB, float>(p, rows, self_plan, p.self_k[layer], p.self_v[layer],
                                       p.text_ctx, true, tiles_early, q, partials, xs, stage,
                                       att_shared);
    } else if (attention) {
      AttentionPhase<MaxB, float>(p, rows, p.self_k[layer], p.self_v[layer], p.text_ctx, true,
                                  p.self_split_keys, max_splits, q, att, partials, xs,
                                  merge_weights);
    }
    // -- (Partials merged +) output projection + residual (unless fused above).
    if (!fuse_self) {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.out_w, w.out_b, kD, FirstColumn<kD>(), first);
      GridWait(p.sync, target, split);
      const Residual<kD> res(x, rows.batch, kD);
      if (!blocks_att) {
        CopyRows<MaxB>(att, rows.batch, kD, xs);
      } else if (has_d_cols) {
        MergePartials<MaxB>(self_plan, rows.batch, partials, pstage, xs);
      }
      Gemv<kD, MaxB>(w.out_w, w.out_b, kD, xs, first, res);
    }
    // -- LN2 + cross-attention query.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.cq_w, w.cq_b, kD, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln2_g, w.ln2_b);
      if (tiles_early) {
        PrefetchFirstTile<Cross>(
            cross_plan, rows.batch, rows.position, static_cast<const Cross*>(p.cross_k[layer]),
            static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx, false, stage);
      }
      GridWait(p.sync, target, split);
      NormRows<MaxB>(p, rows, x, norm, false, xs);
      Gemv<kD, MaxB>(w.cq_w, w.cq_b, kD, xs, first, [&](int r, int col, float acc) {
        if (r < rows.batch) q[r * kD + col] = acc;
      });
    }
    // -- Cross-attention over the encoder's keys.
    GridSync(p.sync, target);
    if (attention && blocks_att) {
      BlockAttentionPhase<MaxB, Cross>(p, rows, cross_plan,
                                       static_cast<const Cross*>(p.cross_k[layer]),
                                       static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx,
                                       false, tiles_early, q, partials, xs, stage, att_shared);
    } else if (attention) {
      AttentionPhase<MaxB, Cross>(p, rows, static_cast<const Cross*>(p.cross_k[layer]),
                                  static_cast<const Cross*>(p.cross_v[layer]), p.audio_ctx, false,
                                  p.cross_split_keys, max_splits, q, att, partials, xs,
                                  merge_weights);
    }
    // -- (Partials merged +) output projection + residual.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.cout_w, w.cout_b, kD, FirstColumn<kD>(), first);
      GridWait(p.sync, target, split);
      const Residual<kD> res(x, rows.batch, kD);
      if (!blocks_att) {
        CopyRows<MaxB>(att, rows.batch, kD, xs);
      } else if (has_d_cols) {
        MergePartials<MaxB>(cross_plan, rows.batch, partials, pstage, xs);
      }
      Gemv<kD, MaxB>(w.cout_w, w.cout_b, kD, xs, first, res);
    }
    if (fuse_ffn) {
      // -- LN3 + FFN1 + GELU of this block's hidden units + their FFN2 share, added into
      //    x_next (zeroed; block 0 adds x + bias): one phase instead of two. Atomic sums:
      //    the order of the blocks' shares varies from run to run (rounding only).
      GridArrive(p.sync, target, split);
      const int u0 = blockIdx.x * ffn_units, u1 = min(kFf, u0 + ffn_units);
      const int warp = threadIdx.x / kWarp;
      const int col = u0 + warp * Geom<kD>::kCols + threadIdx.x % kWarp / Geom<kD>::kLanes;
      WeightRegs<kD> first;
      LoadWeights<kD>(w.ff1_w, w.ff1_b, u1, col, first);
      // FFN2 weights of the units for output column threadIdx.x (< 384), 4 f16 per piece.
      uint2 w2[kMaxFfnUnits / 4];
#pragma unroll
      for (int j = 0; j < kMaxFfnUnits / 4; ++j) {
        w2[j] = threadIdx.x < kD && u0 + 4 * j < u1
                    ? *reinterpret_cast<const uint2*>(
                          w.ff2_w + static_cast<size_t>(threadIdx.x) * kFf + u0 + 4 * j)
                    : make_uint2(0, 0);
      }
      const float b2 = threadIdx.x < kD && blockIdx.x == 0 ? w.ff2_b[threadIdx.x] : 0.0f;
      const NormRegs norm = LoadNorm<MaxB>(w.ln3_g, w.ln3_b);
      GridWait(p.sync, target, split);
      if (u0 < kFf) {      // block-uniform
        float base[MaxB];  // block 0: the residual stream it adds
#pragma unroll
        for (int r = 0; r < MaxB; ++r) {
          base[r] = blockIdx.x == 0 && threadIdx.x < kD && r < rows.batch
                        ? __ldcg(x + r * kD + threadIdx.x)
                        : 0.0f;
        }
        NormRows<MaxB>(p, rows, x, norm, false, xs);
        if (warp * Geom<kD>::kCols < u1 - u0) {  // warp-uniform
          GemvColumn<kD, MaxB>(first, col, u1, xs, [&](int r, int c, float acc) {
            ffn_hidden[r * kMaxFfnUnits + (c - u0)] = GeluExact(acc);
          });
        }
        __syncthreads();
        if (threadIdx.x < kD) {
          float y[MaxB];
#pragma unroll
          for (int r = 0; r < MaxB; ++r) y[r] = 0.0f;
#pragma unroll
          for (int j = 0; j < kMaxFfnUnits / 4; ++j) {
            if (u0 + 4 * j >= u1) break;
            const __half2* h = reinterpret_cast<const __half2*>(&w2[j]);
            const float2 f01 = __half22float2(h[0]), f23 = __half22float2(h[1]);
#pragma unroll
            for (int r = 0; r < MaxB; ++r) {
              const float4 hv =
                  *reinterpret_cast<const float4*>(ffn_hidden + r * kMaxFfnUnits + 4 * j);
              float acc = y[r];
              acc = fmaf(f01.x, hv.x, acc);
              acc = fmaf(f01.y, hv.y, acc);
              acc = fmaf(f23.x, hv.z, acc);
              acc = fmaf(f23.y, hv.w, acc);
              y[r] = acc;
            }
          }
#pragma unroll
          for (int r = 0; r < MaxB; ++r) {
            if (r < rows.batch) {
              atomicAdd(x_next + r * kD + threadIdx.x,
                        blockIdx.x == 0 ? y[r] + base[r] + b2 : y[r]);
            }
          }
        }
      }
      continue;
    }
    // -- LN3 + FFN1 + GELU.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kD> first;
      LoadWeights<kD>(w.ff1_w, w.ff1_b, kFf, FirstColumn<kD>(), first);
      const NormRegs norm = LoadNorm<MaxB>(w.ln3_g, w.ln3_b);
      GridWait(p.sync, target, split);
      NormRows<MaxB>(p, rows, x, norm, false, xs);
      Gemv<kD, MaxB>(w.ff1_w, w.ff1_b, kFf, xs, first, [&](int r, int col, float acc) {
        if (r < rows.batch) hidden[r * kFf + col] = GeluExact(acc);
      });
    }
    // -- FFN2 + residual.
    {
      GridArrive(p.sync, target, split);
      WeightRegs<kFf> first;
      LoadWeights<kFf>(w.ff2_w, w.ff2_b, kD, FirstColumn<kFf>(), first);
      GridWait(p.sync, target, split);
      const Residual<kFf> res(x, rows.batch, kD);
      CopyRows<MaxB>(hidden, rows.batch, kFf, xs);
      Gemv<kFf, MaxB>(w.ff2_w, w.ff2_b, kD, xs, first, res);
    }
  }

  x = fuse_ffn ? xbuf[p.n_layers & 1] : xbuf[0];
  // -- Final LayerNorm + logits + suppression, argmax, log-sum-exp.
  {
    GridArrive(p.sync, target, split);
    WeightRegs<kD> first;
    LoadWeights<kD>(p.token_embedding, nullptr, p.vocab, FirstColumn<kD>(), first);
    const NormRegs norm = LoadNorm<MaxB>(p.final_g, p.final_b);
    GridWait(p.sync, target, split);
    NormRows<MaxB>(p, rows, x, norm, false, xs);
    if (p.profile_mode == kProfileNoLogits) {
      FinishLaunch(p.sync, &last_block);
      return;
    }
    Best best{-INFINITY, 0.0f, INT_MAX};  // of row (lane % 16) on the lanes where that is < B
    Gemv<kD, MaxB>(p.token_embedding, nullptr, p.vocab, xs, first,
                   [&](int r, int col, float v) { TakeLogit(p, rows.batch, r, col, v, best); });
    FinishLogits<MaxB>(p, rows.batch, best, stats, warp_best, &last_block);
  }
}

__global__ void FloatToHalfKernel(const float* src, __half* dst, int64_t n) {
  WaitForPreviousKernel();
  AllowNextKernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2half_rn(src[i]);
  }
}

template <int MaxB, typename Cross>
cudaError_t LaunchTyped(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  const int max_splits = MaxSplits(p.audio_ctx, p.text_ctx, p.cross_split_keys, p.self_split_keys);
  const Layout lay = MakeLayout(p.batch, max_splits, ctx.sm_count);
  if (lay.total > p.workspace_floats || p.workspace == nullptr || p.sync == nullptr) {
    return cudaErrorInvalidValue;
  }
  auto* kernel = PersistentDecoderKernel<MaxB, Cross>;
  const size_t smem = PersistentDecoderSharedBytes(MaxB, ctx.sm_count);
  // (Checked against the device's limit, lowered by WAAV_GPU_MAX_SHARED_BYTES, before the
  // attribute: a device with less refuses the launch, not the whole step.)
  if (smem > static_cast<size_t>(MaxSharedBytesPerBlock())) return cudaErrorNotSupported;
  cudaError_t err =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) return cudaErrorNotSupported;
  PersistentDecoderParams params = p;
  params.error_word = ctx.error_word;
  int max_splits_arg = max_splits;
  void* args[] = {&params, const_cast<Layout*>(&lay), &max_splits_arg};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(ctx.sm_count),
                                     dim3(kThreads), args, smem, ctx.stream);
}

template <int MaxB>
cudaError_t LaunchForBatch(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  return p.cross_f16 ? LaunchTyped<MaxB, __half>(ctx, p) : LaunchTyped<MaxB, float>(ctx, p);
}

}  // namespace

size_t PersistentWorkspaceFloats(int batch, int audio_ctx, int text_ctx, int cross_split_keys,
                                 int self_split_keys, int max_blocks) {
  return MakeLayout(batch, MaxSplits(audio_ctx, text_ctx, cross_split_keys, self_split_keys),
                    max_blocks)
      .total;
}

bool PersistentDecoderSupported(int batch, int n_layers, int d_model, int n_heads, int ffn) {
  return batch >= 1 && batch <= kPersistentMaxBatch && n_layers >= 1 &&
         n_layers <= kPersistentMaxLayers && d_model == kD && n_heads == kH && ffn == kFf;
}

size_t PersistentDecoderSharedBytes(int batch, int sm_count) {
  // The kernel's row bucket (its MaxB instance); the FFN's hidden units, the K/V stage and the
  // partials' stage (which also holds the fused self-attention's W_o slice, 384 x 64 f16).
  const int max_b = batch <= 2 ? batch : batch <= 4 ? 4 : 8;
  return sizeof(float) * max_b * kFf + kStageBytes +
         std::max(sizeof(float) * kChunkPartial * MaxChunks(max_b, sm_count), size_t{kD} * kDh * 2);
}

bool PersistentDecoderFits(int batch, int sm_count) {
  return batch >= 1 && batch <= kPersistentMaxBatch && sm_count >= 1 &&
         PersistentDecoderSharedBytes(batch, sm_count) <=
             static_cast<size_t>(MaxSharedBytesPerBlock());
}

cudaError_t LaunchPersistentDecoder(const LaunchContext& ctx, const PersistentDecoderParams& p) {
  if (!PersistentDecoderSupported(p.batch, p.n_layers, kD, kH, kFf) || p.cross_split_keys < 1 ||
      p.self_split_keys < 1 ||
      (!p.block_attention &&
       MaxSplits(p.audio_ctx, p.text_ctx, p.cross_split_keys, p.self_split_keys) > kMaxSplits)) {
    return cudaErrorInvalidValue;
  }
  if (p.cluster && ClusterDecoderAvailable(p)) {
    return LaunchClusterDecoder(ctx, p);
  }
  if (p.choice_out != nullptr) return cudaErrorNotSupported;  // the cluster step's only
  if (p.batch == 1) return LaunchForBatch<1>(ctx, p);
  if (p.batch == 2) return LaunchForBatch<2>(ctx, p);
  if (p.batch <= 4) return LaunchForBatch<4>(ctx, p);
  return LaunchForBatch<8>(ctx, p);
}

cudaError_t LaunchFloatToHalf(const LaunchContext& ctx, const float* src, __half* dst, int64_t n) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, 256), 4096));
  return Launch(ctx, FloatToHalfKernel, dim3(blocks), dim3(256), 0, src, dst, n);
}

}  // namespace waav::cuda
