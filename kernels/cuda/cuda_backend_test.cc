#include "kernels/cuda/cuda_backend.h"

#include <gtest/gtest.h>

TEST(CudaBackendTest, Placeholder) { SUCCEED(); }
