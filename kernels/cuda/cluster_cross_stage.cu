// EncodeCrossStageMaps (cluster_cross_stage.cuh): the cross K/V tensor maps of the cluster step.
#include "kernels/cuda/cluster_cross_stage.cuh"

#if !defined(WAAV_HIP)

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace waav::cuda {
namespace {

// The driver's encoder, looked up once (the runtime is linked statically; libcuda is not).
PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

}  // namespace

cudaError_t EncodeCrossStageMaps(const PersistentDecoderParams& p, CrossStageMaps& maps) {
  const int64_t keys = int64_t{p.batch} * p.audio_ctx;
  if (keys < 1 || keys > INT32_MAX || p.n_layers < 1 || p.n_layers > kPersistentMaxLayers) {
    return cudaErrorInvalidValue;
  }
  for (int layer = 0; layer < p.n_layers; ++layer) {
    if (p.cross_k[layer] == nullptr || p.cross_v[layer] == nullptr) return cudaErrorInvalidValue;
  }
  const auto encode = Encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  // {dims of a head, keys, heads}: the heads 128 bytes apart, the keys 768 (a map's strides
  // need not grow with the dimension).
  const cuuint64_t dims[3] = {64, static_cast<cuuint64_t>(keys), 6};
  const cuuint64_t strides[2] = {384 * 2, 64 * 2};  // bytes, dimensions 1 and 2
  const cuuint32_t box[3] = {64, kCrossStageRows, 6 / kCrossStageCopies};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  for (int layer = 0; layer < p.n_layers; ++layer) {
    for (int which = 0; which < 2; ++which) {
      const void* base = which == 0 ? p.cross_k[layer] : p.cross_v[layer];
      CUtensorMap* map = which == 0 ? &maps.k[layer] : &maps.v[layer];
      const CUresult r =
          encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(base), dims, strides,
                 box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
    }
  }
  return cudaSuccess;
}

}  // namespace waav::cuda

#endif  // !WAAV_HIP
