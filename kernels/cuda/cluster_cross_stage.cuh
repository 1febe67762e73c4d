// The cluster step's cross K/V stage (cluster_decoder.cu): where each block keeps its share of a
// layer's cross keys and values in shared memory, and the tensor maps that copy them there.
//
// Layout (for the tensor-core cross-attention, cluster_cross_mma.cuh; the CUDA-core one reads
// the rows bulk-copied as they are in global memory): per matrix (K, then V) six head regions
// of kCrossStageRows keys x 64 dims (128 bytes a key),
// each region 1024-byte aligned and swizzled as the tensor copy's 128-byte swizzle leaves it:
// the 16-byte chunk c of key r's row sits at chunk c ^ (r % 8). The 8 keys an ldmatrix reads at
// one chunk so fall in 8 different bank groups (rows of 768 bytes would all share four banks),
// and a warp reading one key's 384 dims (16 bytes a lane) still needs only its four wavefronts.
// kCrossStageCopies 3-D tensor copies per matrix and layer fill it, each a box of {64 dims,
// kCrossStageRows keys, 6 / kCrossStageCopies heads} of the [B x audio_ctx, 384] f16 cross
// cache (the heads 128 bytes apart, the keys 768).
//
// CUDA only (sm_90 tensor maps); under HIP nothing here is compiled.
#pragma once

#if !defined(WAAV_HIP)

#include <cuda.h>  // CUtensorMap (the header's types only: the encoder is looked up at run time)

#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::cuda {

// Keys per head region: Whisper's 1500 cross keys over 16 blocks (94) rounded up to 8 (1024-byte
// regions), a compile-time constant (as a run-time value it took registers the layers' kernel
// spilled for). Blocks with fewer keys leave the rest unread; audio_ctx up to 16 · 96.
inline constexpr int kCrossStageRows = 96;
// Halves of the stage's K and V: 2 matrices x 6 heads x rows x 64.
inline constexpr size_t kCrossStageHalves = size_t{2} * 6 * kCrossStageRows * 64;
// Tensor copies per matrix and layer (each of 6 / kCrossStageCopies heads).
inline constexpr int kCrossStageCopies = 2;

// Per layer, the tensor maps of p.cross_k and p.cross_v (kernel parameter).
struct CrossStageMaps {  // (CUtensorMap carries its own alignment)
  CUtensorMap k[kPersistentMaxLayers];
  CUtensorMap v[kPersistentMaxLayers];
};

// Encodes p's cross K/V (f16, [p.batch x p.audio_ctx, 384] per layer) for boxes of
// kCrossStageRows keys. cudaErrorInvalidValue for shapes a map cannot take or a missing cache
// (checked first, without the driver), cudaErrorNotSupported where the driver has no tensor
// maps. Host function.
cudaError_t EncodeCrossStageMaps(const PersistentDecoderParams& p, CrossStageMaps& maps);

#if defined(__CUDACC__)
namespace cluster_detail {

// Offset (halves) of dims [dim, dim + 8) of key `key` (dim a multiple of 8) in one matrix of the
// stage, whose head regions are `region` halves (kCrossStageRows · 64 in the layers' kernel).
__device__ __forceinline__ int StageOffset(int region, int key, int dim) {
  return (dim / 64) * region + key * 64 + ((((dim % 64) / 8) ^ (key & 7)) * 8);
}

// One matrix of a layer's stage: the box at key `first_key` (of the whole [B x audio_ctx] cache)
// into `dst` (1024-byte aligned), completing `bar`'s phase by the box's bytes (the caller has
// armed it with them). `map`: a kernel parameter's CUtensorMap.
__device__ __forceinline__ void CopyStage(void* dst, const CUtensorMap* map, int first_key,
                                          int first_head, unsigned long long* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(
          static_cast<unsigned>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(first_key), "r"(first_head),
      "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "l"(policy)
      : "memory");
}

// Fetches a map's descriptor ahead of its first copy (kernel parameter).
__device__ __forceinline__ void PrefetchStageMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace cluster_detail
#endif  // __CUDACC__

}  // namespace waav::cuda

#endif  // !WAAV_HIP
