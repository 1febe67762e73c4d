// ClusterCrossAttentionCheck (cluster_cross_check.h): the cross-attention device functions of the
// cluster step in a one-block kernel, for tests.
#include "kernels/cuda/cluster_cross_check.h"
#include "kernels/cuda/device_caps.cuh"

#if !defined(WAAV_HIP)
#include "kernels/cuda/cluster_cross_mma.cuh"
#include "kernels/cuda/cluster_decoder_parts.cuh"
#endif

namespace waav::cuda {

#if defined(WAAV_HIP)

cudaError_t ClusterCrossAttentionCheck(const void*, const void*, int, const float*, float, bool,
                                       float*) {
  return cudaErrorNotSupported;
}

#else

namespace {

using namespace cluster_detail;  // NOLINT(google-build-using-namespace): the parts under test

// Floats before the stage: the query, the warps' partials, the block's partial, merge weights
// (rounded up to 16 bytes).
constexpr size_t kCheckFloats = (size_t{kD} + kWarps * kH * kRec + kH * kRec + 16 * kH + 3) / 4 * 4;

__global__ void __launch_bounds__(kThreads, 1)
    CrossCheckKernel(const __half* k, const __half* v, int n_keys, const float* q, float scale,
                     bool use_mma, float* out) {
#if WAAV_GPU_SM90_CODE
  extern __shared__ float4 smem_raw[];
  float* q_s = reinterpret_cast<float*>(smem_raw);
  float* wpart = q_s + kD;
  float* mine = wpart + kWarps * kH * kRec;
  float* weights = mine + kH * kRec;
  __half* sk = reinterpret_cast<__half*>(reinterpret_cast<float*>(smem_raw) + kCheckFloats);
  const int region = (n_keys + 7) / 8 * 8 * kDh;  // (any multiple of 8 keys)
  __half* sv = sk + kH * region;
  for (int i = threadIdx.x; i < kD; i += kThreads) q_s[i] = q[i];
  // The keys as the layers' copies leave them: in swizzled head regions for the tensor cores
  // (cluster_cross_stage.cuh), as in global memory for the CUDA cores.
  constexpr int kPieces = kD / 8;
  for (int i = threadIdx.x; i < n_keys * kPieces; i += kThreads) {
    const int key = i / kPieces, piece = i % kPieces;
    const int from = key * kD + 8 * piece;
    const int to = use_mma ? StageOffset(region, key, 8 * piece) : from;
    *reinterpret_cast<uint4*>(sk + to) = *reinterpret_cast<const uint4*>(k + from);
    *reinterpret_cast<uint4*>(sv + to) = *reinterpret_cast<const uint4*>(v + from);
  }
  __syncthreads();
  if (use_mma) {
    CrossAttentionMma(sk, sv, n_keys, region, q_s, scale, wpart, mine);
  } else {
    CrossAttentionBalanced(sk, sv, n_keys, q_s, scale, wpart);
    __syncthreads();
    MergeBlock(wpart, mine, weights);
  }
  for (int i = threadIdx.x; i < kH * kRec; i += kThreads) out[i] = mine[i];
#else
  __trap();  // never launched before sm_90 (ClusterCrossAttentionCheck)
#endif
}

}  // namespace

cudaError_t ClusterCrossAttentionCheck(const void* k, const void* v, int n_keys, const float* q,
                                       float scale, bool mma, float* out) {
  if (n_keys < 0 || n_keys > kClusterCrossCheckMaxKeys) return cudaErrorInvalidValue;
  if (!Sm90CodeRuns()) return cudaErrorNotSupported;
  const size_t smem =
      kCheckFloats * sizeof(float) + size_t{2} * kH * ((n_keys + 7) / 8 * 8) * kDh * sizeof(__half);
  cudaError_t e = cudaFuncSetAttribute(
      CrossCheckKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  e = cudaLaunchKernelEx(&config, CrossCheckKernel, static_cast<const __half*>(k),
                         static_cast<const __half*>(v), n_keys, q, scale, mma, out);
  if (e != cudaSuccess) return e;
  return cudaDeviceSynchronize();
}

#endif

}  // namespace waav::cuda
