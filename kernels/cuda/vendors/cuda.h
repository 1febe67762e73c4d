// The CUDA toolkit headers the backend uses. Every file of kernels/cuda/ includes this (through
// gpu.h) instead of naming CUDA headers, so that a HIP build can swap in vendors/hip.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Programmatic dependent launch (Hopper): the kernel that follows may be scheduled while this
// one runs; it waits here until this one's memory is visible.
#define WAAV_GPU_HAS_PDL 1
// mma.sync / ldmatrix / cp.async tensor-core paths (PTX, sm_80 and later).
#define WAAV_GPU_HAS_MMA 1
#define WAAV_GPU_NAME "cuda"
