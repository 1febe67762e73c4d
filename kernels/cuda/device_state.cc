#include "kernels/cuda/device_state.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "engine/runtime/status.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/backend_util.h"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/half_gemm.cuh"
#include "kernels/cuda/shared_kv_attention.cuh"

namespace waav::cuda {
namespace {

// The L2 set aside for persisting lines is a limit of the process's context, shared by every
// backend on the device: the first backend that asks sets it (the largest ask wins while they
// live) and the last one to go puts the limit back. 0 where the device sets none aside (before
// compute capability 8.0; HIP): the backend then gives no hints.
struct PersistingL2Users {
  int users = 0;
  size_t previous = 0, set = 0;
};
std::mutex persisting_l2_mutex;
std::map<int, PersistingL2Users>& PersistingL2ByDevice() {
  static auto* by_device = new std::map<int, PersistingL2Users>();
  return *by_device;
}

absl::StatusOr<size_t> AcquirePersistingL2(int device, size_t bytes) {
  const std::lock_guard<std::mutex> lock(persisting_l2_mutex);
  PersistingL2Users& entry = PersistingL2ByDevice()[device];
  if (entry.users == 0 || bytes > entry.set) {
    size_t previous = 0, set = 0;
    const cudaError_t e = SetAsidePersistingL2(bytes, &previous, &set);
    if (e == cudaErrorNotSupported && entry.users == 0) return 0;
    RETURN_IF_ERROR(GpuStatus("setting L2 aside for shared_kv_l2_retain_bytes", e));
    if (entry.users == 0) entry.previous = previous;
    entry.set = set;
  }
  ++entry.users;
  return entry.set;
}

void ReleasePersistingL2(int device) {
  const std::lock_guard<std::mutex> lock(persisting_l2_mutex);
  PersistingL2Users& entry = PersistingL2ByDevice()[device];
  if (--entry.users == 0) RestorePersistingL2(entry.previous);
}

}  // namespace

DeviceState::~DeviceState() {
  // Teardown: errors here have no one to go to.
  (void)cudaSetDevice(device);
  if (graphs != nullptr) (void)cudaStreamSynchronize(graphs->stream);
  if (l2_lease) ReleasePersistingL2(device);
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
  if (options.shared_kv_l2_retain_bytes > 0) {
    ASSIGN_OR_RETURN(state->l2_set_aside,
                     AcquirePersistingL2(options.device_index,
                                         static_cast<size_t>(options.shared_kv_l2_retain_bytes)));
    state->l2_lease = state->l2_set_aside > 0;
  }
  // (Sm90CodeRuns: an sm_80 build's kernels have no griddepcontrol.wait, so a Hopper running
  // them must not overlap their launches.)
  const bool pdl = options.use_pdl && WAAV_GPU_HAS_PDL && props.major >= 9 && Sm90CodeRuns();
  state->ctx = {state->graphs->stream, pdl, state->error_device, props.multiProcessorCount,
                std::max(0, options.pdl_max_blocks_per_sm)};
  state->gpu_shape = CurrentGpuShape(props.multiProcessorCount);
  RETURN_IF_ERROR(GpuStatus("cudaStreamSynchronize", cudaStreamSynchronize(state->graphs->stream)));
  return state;
}

}  // namespace waav::cuda
