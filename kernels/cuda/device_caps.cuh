// What the current device runs of this binary: whether it has kernels for it at all, whether
// they are the sm_90 code (Hopper's clusters, distributed shared memory, bulk copies and
// programmatic dependent launch) or the sm_80 code (Ampere and Ada, where the kernels made of
// those trap and are never launched), and how much shared memory a block may opt into.
#pragma once

#include "kernels/cuda/gpu.h"

namespace waav::cuda {

// cudaSuccess when this binary holds kernels the current device can run (else typically
// cudaErrorNoKernelImageForDevice).
cudaError_t ProbeKernelImage();

// Whether the current device runs this binary's sm_90 code: compute capability 9.0 or later and
// the kernels compiled for sm_90 or later (their PTX version). An Ampere or Ada GPU runs the
// sm_80 code (CMAKE_CUDA_ARCHITECTURES 80); so does a Hopper given only sm_80 PTX to compile
// (80-virtual), which is how the tests check those paths on one. Cached per device. Always
// false under HIP.
bool Sm90CodeRuns();
// The code the current device runs, for logs: "sm_90", "sm_80 (no cluster step)" or "HIP".
const char* GpuCodeName();

// The dynamic shared memory a block of the current device may opt into (bytes; 0 when the query
// fails): 227 KB on a Hopper, 163 KB on an A100, 99 KB on Ada and on Ampere's smaller parts.
// WAAV_GPU_MAX_SHARED_BYTES (a positive integer) lowers it, so that a bigger GPU takes the paths
// a smaller one would (the tests' check of them); read once per process.
int MaxSharedBytesPerBlock();
// The shared memory of one multiprocessor (bytes; 0 when the query fails), lowered in the same
// proportion as MaxSharedBytesPerBlock by WAAV_GPU_MAX_SHARED_BYTES.
int SharedBytesPerMultiprocessor();

// What a kernel's plan needs to know of the device (host; plans are pure functions of it).
struct GpuShape {
  int sm_count = 0;
  int shared_bytes_per_block = 0;  // MaxSharedBytesPerBlock
  int shared_bytes_per_sm = 0;     // SharedBytesPerMultiprocessor
};
// The current device's, with `sm_count` multiprocessors (the backend's LaunchContext).
GpuShape CurrentGpuShape(int sm_count);
// An H100 SXM's: 132 multiprocessors, 227 KB a block, 228 KB a multiprocessor (for the plans'
// tests, which need no GPU).
inline constexpr GpuShape kH100Shape{132, 232448, 233472};

}  // namespace waav::cuda
