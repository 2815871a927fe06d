// Device helpers shared by the TW kernel files (tw_gemm.cu: mma.sync, GEMV, finalize, host planning;
// tw_gemm_sm90.cu: wgmma), split in two so the heavy instantiations compile in parallel. No torch headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tw_gemm.h"

namespace sparseprune {
namespace tw {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float activate(float v, Activation act) {
  if (act == Activation::kRelu) return fmaxf(v, 0.0f);
  if (act == Activation::kGelu) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  return v;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy to a shared byte address; src_bytes == 0 fills zeros (padding rows, rows past M).
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16_to(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The fp32 workspace follows the output layout, so the finalize pass reads it coalesced: [M x TG] for a
// row-major y, [TG x M] for a feature-major one (TG = num_tiles * G, positions as in `cols`).
__device__ __forceinline__ int64_t ws_index(const PackedTile& w, const Problem& p, int64_t m, int64_t pos) {
  return p.sym == 1 ? pos * p.M + m : m * (static_cast<int64_t>(w.num_tiles) * w.granularity) + pos;
}

// Bias, TEW residual and activation for output (m, col); x is read through its strides.
template <typename T>
__device__ __forceinline__ float finish(float v, int col, int64_t m, const PackedTile& w, const T* x,
                                        int64_t sxm, int64_t sxk, const T* bias, Activation act) {
  if (bias != nullptr) v += to_float(bias[col]);
  if (w.res_ptr != nullptr) {
    const T* res_vals = static_cast<const T*>(w.res_vals);
    for (int e = w.res_ptr[col]; e < w.res_ptr[col + 1]; ++e) {
      v += to_float(x[m * sxm + static_cast<int64_t>(w.res_rows[e]) * sxk]) * to_float(res_vals[e]);
    }
  }
  return activate(v, act);
}

// Writes a finished fp32 tile (staged in shared memory) through `cols`, applying bias, TEW residual and
// activation; threads tid = 0 .. kThreads-1 share the work. x is feature-major here: x[k*ldx + m].
template <typename T, int BM, int BN, int kThreads>
__device__ __forceinline__ void store_tile(const float* s_c, int ldc, const int* s_cols, const PackedTile& w,
                                           const Problem& p, int64_t m0, bool feature_major_out, int tid) {
  constexpr int BCH = BN / 8;
  const int64_t M = p.M, ldx = p.sxk;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const T* bias = static_cast<const T*>(p.bias);
  if (feature_major_out) {  // y[col*syn + m]: 8 consecutive m per thread, one 16-byte store
    for (int it = tid; it < (BM / 8) * BN; it += kThreads) {
      const int n = it % BN, c = it / BN;
      const int col = s_cols[n];
      const int64_t mbase = m0 + c * 8;
      if (col < 0 || mbase >= M) continue;
      alignas(16) T out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        out[e] = from_float<T>(finish(s_c[(c * 8 + e) * ldc + n], col, mbase + e, w, x, 1, ldx, bias,
                                      p.activation));
      }
      T* dst = y + static_cast<int64_t>(col) * p.syn + mbase;
      if (p.y_vec16 && mbase + 8 <= M) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
      } else {
        for (int e = 0; e < 8 && mbase + e < M; ++e) dst[e] = out[e];
      }
    }
  } else {  // y[m*sym + col]: a run of 8 contiguous, aligned columns goes out as one 16-byte store
    for (int it = tid; it < BM * BCH; it += kThreads) {
      const int r = it / BCH, n0 = (it % BCH) * 8;
      const int64_t m = m0 + r;
      const int col0 = s_cols[n0];
      if (col0 < 0 || m >= M) continue;
      alignas(16) T out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int col = s_cols[n0 + e];
        out[e] = from_float<T>(col < 0 ? 0.0f
                                       : finish(s_c[r * ldc + n0 + e], col, m, w, x, 1, ldx, bias,
                                                p.activation));
      }
      T* row = y + m * p.sym;
      if (p.y_vec16 && col0 % 8 == 0 && s_cols[n0 + 7] == col0 + 7) {
        *reinterpret_cast<uint4*>(row + col0) = *reinterpret_cast<const uint4*>(out);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int col = s_cols[n0 + e];
          if (col >= 0) row[static_cast<int64_t>(col) * p.syn] = out[e];
        }
      }
    }
  }
}


inline const char* check_launch() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

inline int cdiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Raises kKernel's dynamic shared-memory limit to kBytes, once per process per kernel (the kernel is a template
// argument), which keeps the per-call host cost down. Returns an error message or nullptr.
template <auto kKernel, int kBytes>
const char* allow_dynamic_smem() {
  static const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Calls run(Cfg{}) with the CTA configuration for the tile width G (128 or 64) and the plan's row block (256 or
// 128 rows): both Hopper kernels choose among their four configurations this way.
template <typename Cfg128x256, typename Cfg128x128, typename Cfg64x256, typename Cfg64x128, typename Run>
const char* with_tile_config(const PackedTile& w, const Plan& plan, Run run) {
  if (w.granularity == 128) return plan.block_m == 256 ? run(Cfg128x256{}) : run(Cfg128x128{});
  return plan.block_m == 256 ? run(Cfg64x256{}) : run(Cfg64x128{});
}

// Launches a TW GEMM kernel (mma.sync or wgmma) with one CTA per (tile, M block, K split). `Cfg` gives the CTA
// rows, threads and dynamic shared memory.
template <typename Cfg, auto kKernel>
const char* launch_tiles(const PackedTile& w, const Problem& p, int splits) {
  if (const char* err = allow_dynamic_smem<kKernel, Cfg::kSmemBytes>()) return err;
  const int m_blocks = cdiv(p.M, Cfg::kBM);
  const int64_t ctas = static_cast<int64_t>(w.num_tiles) * m_blocks * splits;
  kKernel<<<static_cast<unsigned>(ctas), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(w, p, m_blocks, splits,
                                                                                     p.sym == 1);
  return check_launch();
}

// Implemented in tw_gemm_sm90.cu.
// True when the wgmma kernels hold sm_90a machine code that this (Hopper) device runs.
bool wgmma_available();
// Launches the wgmma kernel chosen by `plan` (G 64 or 128); returns an error message or nullptr.
const char* launch_wgmma(const PackedTile& w, const Problem& p, const Plan& plan);
// Implemented in tw_gemm_sm90_ws.cu: the warp-specialized, persistent wgmma kernel (same contract).
const char* launch_wgmma_ws(const PackedTile& w, const Problem& p, const Plan& plan);

}  // namespace tw
}  // namespace sparseprune
