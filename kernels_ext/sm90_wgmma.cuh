// Inline-PTX wrappers of the sm_90a warpgroup MMA (wgmma) used by the Hopper TW kernels: D(64 x N, fp32) +=
// A(64 x 16) B(16 x N) with both operands in shared memory, MN-major, 128-byte swizzled, plus the mbarrier and
// register-reallocation primitives of the warp-specialized kernel. PTX names every accumulator register, hence
// the long operand lists; and the host's lookup of the driver's tensor-map encoder for their TMA loads. No torch
// headers here.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace sparseprune {
namespace tw {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPARSEPRUNE_WGMMA 1
#endif

// Shared-memory matrix descriptor: start address, leading (LBO: next 64-element atom along M/N) and stride
// (SBO: next 8-row group along K) byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_byte_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16;
  desc |= static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return desc;
}

// Byte offset of 16-byte chunk `chunk` (8 elements along M/N) of K row `k` in a stage of 64-wide slabs: the
// 128-byte swizzle that the descriptors above describe (slab = 64 M/N elements x 64 K rows).
__device__ __forceinline__ int slab_offset(int k, int chunk, int slab_bytes) {
  return (chunk >> 3) * slab_bytes + (k >> 3) * 1024 + (k & 7) * 128 + (((chunk & 7) ^ (k & 7)) << 4);
}

#ifdef SPARSEPRUNE_WGMMA
// mbarrier in shared memory (byte address `bar`) expecting `count` arrivals per phase.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialised mbarriers visible to the other threads (and to the async proxy that cp.async arrives through).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Spins until the phase of `bar` with parity `parity` has completed (a fresh barrier counts parity 1 as done).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}
// True when the phase of `bar` with parity `parity` has completed; never waits.
__device__ __forceinline__ bool mbarrier_test_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar` that also raises the bytes its current phase waits for (tensor copies complete them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Box (c0, c1) of the 2-D tensor map `map` (a __grid_constant__ kernel parameter) into shared memory at `dst` by the
// TMA unit, swizzled as the map says; the bytes complete on `bar`. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued so far has landed (the expected count already
// includes it: .noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Named barrier among `Threads` threads (id 0 is __syncthreads).
template <int Threads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(Threads) : "memory");
}
// Named barrier among `Threads` threads that also tells whether `pred` held in every one of them.
template <int Threads>
__device__ __forceinline__ bool named_barrier_all(int id, bool pred) {
  uint32_t all;
  asm volatile(
      "{\n.reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.and.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(all)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "n"(Threads)
      : "memory");
  return all != 0;
}
// Per-warpgroup register budget (the whole warpgroup executes it).
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Four 8 x 8 16-bit matrices from MMA fragments (register q of each lane: row lane / 4, columns 2 (lane % 4) and
// + 1 of matrix q) to shared memory transposed: lane 8q + r gives the address of row r of stored matrix q, which
// receives column r of the fragment matrix.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
// The same four matrices stored as they are: lane 8q + r gives the address of row r of matrix q.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
// Asynchronous shared -> global copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) by the TMA unit,
// in this thread's current bulk group.
__device__ __forceinline__ void bulk_copy_to_global(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until this thread's bulk copies have read their shared-memory sources (their global writes may still run).
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// Accumulators must stay in registers across the asynchronous MMA: callers fence them with wgmma_fence_operand.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int N, typename T>
__device__ __forceinline__ void wgmma_mn_major(float* d, uint64_t desc_a, uint64_t desc_b);

// Eight accumulator operands d[i .. i + 7] of the asm statements below.
#define SPARSEPRUNE_ACC8(i)                                                                                  \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
// wgmma_mn_major<N, T>: D(64 x N) += A B, both operands MN-major (transposed), scale-d on. REGS names the N / 2
// accumulator registers %0 .., DESC the two descriptor operands and the scale-d flag after them.
#define SPARSEPRUNE_WGMMA_MN(N, T, PTX_TYPE, REGS, DESC_A, DESC_B, SCALE_D, ...)                            \
  template <>                                                                                               \
  __device__ __forceinline__ void wgmma_mn_major<N, T>(float* d, uint64_t desc_a, uint64_t desc_b) {       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " {" REGS "}, " DESC_A \
                 ", " DESC_B ", p, 1, 1, 1, 1;\n}\n"                                                          \
                 : __VA_ARGS__                                                                              \
                 : "l"(desc_a), "l"(desc_b), "r"(1));                                                       \
  }

SPARSEPRUNE_WGMMA_MN(64, __half, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "%32", "%33", "%34", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24))
SPARSEPRUNE_WGMMA_MN(64, __nv_bfloat16, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31", "%32", "%33", "%34", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24))
SPARSEPRUNE_WGMMA_MN(80, __half, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39", "%40", "%41", "%42", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32))
SPARSEPRUNE_WGMMA_MN(80, __nv_bfloat16, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39", "%40", "%41", "%42", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32))
SPARSEPRUNE_WGMMA_MN(96, __half, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47", "%48", "%49", "%50", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40))
SPARSEPRUNE_WGMMA_MN(96, __nv_bfloat16, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47", "%48", "%49", "%50", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40))
SPARSEPRUNE_WGMMA_MN(112, __half, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55", "%56", "%57", "%58", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40), SPARSEPRUNE_ACC8(48))
SPARSEPRUNE_WGMMA_MN(112, __nv_bfloat16, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55", "%56", "%57", "%58", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40), SPARSEPRUNE_ACC8(48))
SPARSEPRUNE_WGMMA_MN(128, __half, "f16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63", "%64", "%65", "%66", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40), SPARSEPRUNE_ACC8(48), SPARSEPRUNE_ACC8(56))
SPARSEPRUNE_WGMMA_MN(128, __nv_bfloat16, "bf16", "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63", "%64", "%65", "%66", SPARSEPRUNE_ACC8(0), SPARSEPRUNE_ACC8(8), SPARSEPRUNE_ACC8(16), SPARSEPRUNE_ACC8(24), SPARSEPRUNE_ACC8(32), SPARSEPRUNE_ACC8(40), SPARSEPRUNE_ACC8(48), SPARSEPRUNE_ACC8(56))
#undef SPARSEPRUNE_WGMMA_MN
#undef SPARSEPRUNE_ACC8

// One K step of a warpgroup: K16Steps k16 MMAs for each of its MIWG 64-row blocks of A (slabs first_slab ..),
// all sharing B. sa/sb are shared-memory byte addresses of stages laid out by slab_offset.
template <typename T, int BN, int MIWG, int K16Steps>
__device__ __forceinline__ void wgmma_k_step(float (&acc)[MIWG][BN / 2], uint32_t sa, uint32_t sb, int first_slab,
                                             int slab_bytes) {
#pragma unroll
  for (int kk = 0; kk < K16Steps; ++kk) {
    const uint64_t desc_b = wgmma_desc(sb + kk * 2048, slab_bytes, 1024);
#pragma unroll
    for (int i = 0; i < MIWG; ++i) {
      const uint32_t a_addr = sa + (first_slab + i) * slab_bytes + kk * 2048;
      wgmma_mn_major<BN, T>(acc[i], wgmma_desc(a_addr, slab_bytes, 1024), desc_b);
    }
  }
}

#endif  // SPARSEPRUNE_WGMMA

// The driver's tensor-map encoder, looked up once (the runtime links no driver symbols); nullptr if missing.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                             &found);
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encode;
}

}  // namespace tw
}  // namespace sparseprune
