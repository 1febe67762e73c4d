#include "kernels/cuda/device_state.h"

#include <algorithm>

#include "engine/runtime/status.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/backend_util.h"
#include "kernels/cuda/half_gemm.cuh"

namespace waav::cuda {

DeviceState::~DeviceState() {
  // Teardown: errors here have no one to go to.
  (void)cudaSetDevice(device);
  if (graphs != nullptr) (void)cudaStreamSynchronize(graphs->stream);
  if (error_host != nullptr) (void)cudaFreeHost(error_host);
}

absl::StatusOr<std::shared_ptr<DeviceState>> CreateDeviceState(const CudaBackendOptions& options,
                                                               const cudaDeviceProp& props,
                                                               std::string* gemm_description) {
  auto state = std::make_shared<DeviceState>();
  state->device = options.device_index;
  state->pool = std::make_shared<DevicePool>(options.device_index);
  state->graphs = std::make_shared<GraphRuntime>();
  state->graphs->device = options.device_index;
  RETURN_IF_ERROR(GpuStatus("cudaStreamCreate", cudaStreamCreateWithFlags(&state->graphs->stream,
                                                                          cudaStreamNonBlocking)));
  RETURN_IF_ERROR(AllocateErrorWord(&state->error_host, &state->error_device));
  ASSIGN_OR_RETURN(
      state->counters,
      AllocateDeviceTensor(state->pool, Shape{kAttentionCounters + kHalfGemmSplitCounters},
                           DType::kI32));
  RETURN_IF_ERROR(GpuStatus("cudaMemset",
                            cudaMemsetAsync(state->counters.data(), 0, state->counters.size_bytes(),
                                            state->graphs->stream)));

  ASSIGN_OR_RETURN(*gemm_description,
                   LoadBlas(options.use_cublas, options.cublas_workspace_bytes, state->pool,
                            state->graphs->stream, &state->blas_workspace, &state->blas));
  RETURN_IF_ERROR(GpuStatus("HalfGemm shared memory", PrepareHalfGemm()));
  RETURN_IF_ERROR(GpuStatus("flash attention shared memory", PrepareFlashAttention2()));
  state->gemm = {state->blas.get(),
                 options.math,
                 options.skinny_max_rows,
                 options.use_half_gemm,
                 options.half_gemm_narrow_tiles,
                 options.half_gemm_split_k_waves,
                 props.multiProcessorCount,
                 state->counters.data_as<int>() + kAttentionCounters,
                 options.blas_bias_epilogue};
  const bool pdl = options.use_pdl && WAAV_GPU_HAS_PDL && props.major >= 9;
  state->ctx = {state->graphs->stream, pdl, state->error_device, props.multiProcessorCount,
                std::max(0, options.pdl_max_blocks_per_sm)};
  RETURN_IF_ERROR(GpuStatus("cudaStreamSynchronize", cudaStreamSynchronize(state->graphs->stream)));
  return state;
}

}  // namespace waav::cuda
