// The standalone GPU micro-benchmarks' error check (l2_bandwidth.cu, dsmem_exchange.cu): a CUDA
// runtime call that fails prints where and why, and the enclosing function returns false.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

#define WAAV_BENCH_CHECK(call)                                                                  \
  do {                                                                                          \
    const cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      return false;                                                                             \
    }                                                                                           \
  } while (0)
