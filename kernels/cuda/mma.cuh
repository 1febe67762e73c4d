// Tensor-core and async-copy primitives (sm_80+ PTX) shared by the f16 kernels: cp.async,
// ldmatrix, mma.sync m16n8k16 (f16 in, f32 accumulate) and m16n8k32 (i8 in, i32 accumulate), f16
// packing and the fast exp2.
// Only for builds with WAAV_GPU_HAS_MMA (the CUDA build).
#pragma once

#include <cstdint>

#include "kernels/cuda/gpu.h"

#if WAAV_GPU_HAS_MMA

namespace waav::cuda::mma {

__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global → shared; bytes past src_bytes are zero-filled (0: a zero chunk).
__device__ __forceinline__ void CopyAsync16(void* smem, const void* global, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(smem)),
               "l"(global), "r"(src_bytes));
}
__device__ __forceinline__ void CommitAsync() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitAsync() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
// Four 8×8 b16 matrices; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void LdMatrix4(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}
__device__ __forceinline__ void LdMatrix4Trans(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}
// c[16×8] += a[16×16] · b[16×8], f16 operands, f32 accumulators.
__device__ __forceinline__ void Mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c[16×8] += a[16×32] · b[32×8], i8 operands, i32 accumulators (exact). Lane l (g = l / 4,
// c = l % 4) holds a: rows g and g + 8 at k 4c .. 4c + 3, then the same rows at k 16 + 4c ..;
// b: column g at k 4c .. 4c + 3 and 16 + 4c ..; c as in the f16 mma.
__device__ __forceinline__ void Imma16832(int* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// 2^x on the special-function unit (relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace waav::cuda::mma

#endif  // WAAV_GPU_HAS_MMA
