// mma.sync building blocks (sm_80+) shared by the kernels that use them: the TW tensor-core tile path (tw_gemm.cu),
// the TW tensor-core GEMV (tw_gemv.cu) and the element-wise N:M one (nm_gemv_mma.cu).
#pragma once

#include "tw_device.cuh"

namespace sparseprune {
namespace tw {

// Four 8 x 8 b16 matrices from shared memory (at a shared-space address): the A fragment of m16n8k16 from an
// operand stored row-major (M x K).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8 x 8 b16 matrices from shared memory (at a shared-space address), transposed: the A or B fragments of
// m16n8k16 from operands stored K-major.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) { ldmatrix_x4_trans(r, smem_addr(p)); }

template <typename T>
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b);
template <>
__device__ __forceinline__ void mma_16816<__half>(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// XOR swizzle of 16-byte chunks inside a shared-memory row of `Chunks` chunks: the 8 rows one ldmatrix reads
// at the same logical chunk land in 8 different bank groups.
template <int Chunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(Chunks >= 2, "rows of at least 32 bytes");
  if constexpr (Chunks >= 8) {
    return chunk ^ (row & 7);
  } else if constexpr (Chunks == 4) {
    return chunk ^ ((row >> 1) & 3);
  } else {
    return chunk ^ ((row >> 2) & 1);
  }
}

}  // namespace tw
}  // namespace sparseprune
