// Pointwise kernels added for Silero VAD: ReLU / sigmoid (alone or as the epilogue of Linear and
// Conv1d), the complex magnitude of a [real | imaginary] spectrum, and one LSTM cell step.
// Like kernels.h, this header carries no inline code: the kernels are compiled with
// -march=${WAAV_CPU_ARCH} and the backend that calls them is not.
#pragma once

#include <cstdint>

#include "engine/runtime/dtype.h"

namespace waav::cpu {

struct KernelContext;

// The functions ActivationKernel applies; the backend maps waav::Activation onto these
// (kGelu goes to GeluKernel, kNone to a copy).
enum class Pointwise : uint8_t { kRelu, kSigmoid };

// y[i] = fn(x[i]) for i < n; y may be x. ReLU keeps NaN; sigmoid is within 3 ulp of exact.
void ActivationKernel(const KernelContext& ctx, Pointwise fn, const float* x, float* y, int64_t n);

// y[r, i] = sqrt(x[r, i]² + x[r, half + i]²) for r < rows, i < half; x is [rows, 2·half].
void ComplexMagnitudeKernel(const KernelContext& ctx, const float* x, int64_t rows, int64_t half,
                            float* y);

// See Backend::LstmCell. `xh` [batch, input + hidden] and `gates` [batch, 4·hidden] are
// workspace owned by the caller, disjoint from everything else; h_out/c_out may be h/c.
struct LstmShape {
  int64_t batch, input, hidden;
};
void LstmCellKernel(const KernelContext& ctx, const LstmShape& shape, const float* x,
                    const float* h, const float* c, const void* weight, DType weight_dtype,
                    const float* bias, float* xh, float* gates, float* h_out, float* c_out);

}  // namespace waav::cpu
