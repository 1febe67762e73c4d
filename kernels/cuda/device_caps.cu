#include <atomic>
#include <cstdlib>

#include "kernels/cuda/device_caps.cuh"

namespace waav::cuda {
namespace {

// The kernel whose attributes say which of the binary's images the device loaded.
__global__ void ProbeKernel(int* out) {
  if (out != nullptr) *out = 0;
}

int CurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

// WAAV_GPU_MAX_SHARED_BYTES, or 0 when unset or not a positive integer.
int SharedBytesCap() {
  static const int cap = [] {
    const char* text = std::getenv("WAAV_GPU_MAX_SHARED_BYTES");
    if (text == nullptr || *text == '\0') return 0;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value <= 0 || value > (1L << 30)) return 0;
    return static_cast<int>(value);
  }();
  return cap;
}

}  // namespace

cudaError_t ProbeKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(ProbeKernel));
}

bool Sm90CodeRuns() {
#if defined(WAAV_HIP)
  return false;
#else
  constexpr int kCachedDevices = 64;
  static std::atomic<int> known[kCachedDevices] = {};  // 0 unknown, 1 no, 2 yes
  const int device = CurrentDevice();
  if (device < 0) return false;
  if (device < kCachedDevices && known[device].load() != 0) return known[device].load() == 2;
  int major = 0;
  cudaFuncAttributes attributes;
  const bool runs =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      major >= 9 &&
      cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(ProbeKernel)) ==
          cudaSuccess &&
      attributes.ptxVersion >= 90;
  if (device < kCachedDevices) known[device].store(runs ? 2 : 1);
  return runs;
#endif
}

const char* GpuCodeName() {
#if defined(WAAV_HIP)
  return "HIP";
#else
  return Sm90CodeRuns() ? "sm_90" : "sm_80 (no cluster step)";
#endif
}

int MaxSharedBytesPerBlock() {
  const int device = CurrentDevice();
  int bytes = 0;
  if (device < 0 || cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                           device) != cudaSuccess) {
    return 0;
  }
  const int cap = SharedBytesCap();
  return cap > 0 && cap < bytes ? cap : bytes;
}

int SharedBytesPerMultiprocessor() {
  const int device = CurrentDevice();
  int block = 0, sm = 0;
  if (device < 0 ||
      cudaDeviceGetAttribute(&block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) !=
          cudaSuccess) {
    return 0;
  }
  const int cap = SharedBytesCap();
  if (cap <= 0 || cap >= block || block <= 0) return sm;
  return static_cast<int>(static_cast<long long>(sm) * cap / block);
}

GpuShape CurrentGpuShape(int sm_count) {
  return GpuShape{sm_count, MaxSharedBytesPerBlock(), SharedBytesPerMultiprocessor()};
}

}  // namespace waav::cuda
