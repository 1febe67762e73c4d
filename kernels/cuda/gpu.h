// The one include that selects the GPU vendor: CUDA by default, HIP when WAAV_HIP is defined
// (kernels/hip/CMakeLists.txt builds these same sources with hipcc). Host and device code of
// kernels/cuda/ include this and nothing vendor-specific.
#pragma once

#if defined(WAAV_HIP)
#include "kernels/cuda/vendors/hip.h"
#else
#include "kernels/cuda/vendors/cuda.h"
#endif
