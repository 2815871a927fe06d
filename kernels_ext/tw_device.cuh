// Device helpers shared by the TW kernel files (tw_gemm.cu: mma.sync, finalize, host planning; tw_gemv.cu: the
// small-M GEMVs; tw_gemm_sm90.cu and tw_gemm_sm90_ws.cu: wgmma), split so the heavy instantiations compile in
// parallel. No torch headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

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

// Two values rounded to T and packed in one 32-bit word, lo in the low half (the MMA fragment order).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const T pair[2] = {from_float<T>(lo), from_float<T>(hi)};
  uint32_t word;
  memcpy(&word, pair, sizeof(word));
  return word;
}

// GELU, 0.5 v (1 + erf(v / sqrt 2)), with erf from Abramowitz & Stegun 7.1.26 (absolute error under 1.5e-7, an fp32
// ulp of 1) on the fast exponential and division, branch-free. Against erff it took a fused GELU epilogue on an H200
// (BERT FFN in, 4096 x 768 -> 3072 at 75% TW, x row-major, y feature-major) from 51 to 49 us; the same call without
// an activation takes 24, so the epilogue's other costs dominate (sparseprune/export/chains.py leaves GELU to torch).
__device__ __forceinline__ float gelu(float v) {
  const float z = fabsf(v) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.3275911f, z, 1.0f));
  const float poly =
      t * fmaf(t, fmaf(t, fmaf(t, fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f), 0.254829592f);
  const float erf_abs = 1.0f - poly * __expf(-z * z);
  return 0.5f * v * (1.0f + copysignf(erf_abs, v));
}

__device__ __forceinline__ float activate(float v, Activation act) {
  if (act == Activation::kRelu) return fmaxf(v, 0.0f);
  if (act == Activation::kGelu) return gelu(v);
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

// The activation as a compile-time constant: a loop over many runs then holds only its own code. With the choice
// made at run time inside such a loop, the compiler may evaluate the code of every activation (GELU's erf included)
// and select, and the epilogue's issue time, not its stores, set its length.
template <Activation Act, int Count>
__device__ __forceinline__ void activate_fixed(float (&v)[Count]) {
  if constexpr (Act == Activation::kRelu) {
#pragma unroll
    for (int e = 0; e < Count; ++e) v[e] = fmaxf(v[e], 0.0f);
  } else if constexpr (Act == Activation::kGelu) {
#pragma unroll
    for (int e = 0; e < Count; ++e) v[e] = activate(v[e], Activation::kGelu);
  }
}

// Calls body(std::integral_constant<Activation, act>{}): one branch, then code for that activation only.
template <typename Body>
__device__ __forceinline__ void with_activation(Activation act, Body body) {
  if (act == Activation::kRelu) {
    body(std::integral_constant<Activation, Activation::kRelu>{});
  } else if (act == Activation::kGelu) {
    body(std::integral_constant<Activation, Activation::kGelu>{});
  } else {
    body(std::integral_constant<Activation, Activation::kNone>{});
  }
}

// Applies the activation to a run of outputs, choosing it once per run.
template <int Count>
__device__ __forceinline__ void activate_run(float (&v)[Count], Activation act) {
  with_activation(act, [&](auto a) { activate_fixed<decltype(a)::value>(v); });
}

// The bias of column col as fp32 (0 without a bias).
template <typename T>
__device__ __forceinline__ float column_bias(const Problem& p, int col) {
  return p.bias != nullptr ? to_float(static_cast<const T*>(p.bias)[col]) : 0.0f;
}

// Bias (already loaded) and TEW residual for outputs m0 .. m0+Run-1 of one column (those below M), before the
// activation; x is read through its strides. One residual walk serves the whole run.
template <typename T, int Run>
__device__ __forceinline__ void add_bias_residual_run(float (&v)[Run], int col, float bias, int64_t m0,
                                                      const PackedTile& w, const Problem& p) {
#pragma unroll
  for (int e = 0; e < Run; ++e) v[e] += bias;
  if (w.res_ptr == nullptr) return;
  const T* x = static_cast<const T*>(p.x);
  const T* res_vals = static_cast<const T*>(w.res_vals);
#pragma unroll 1
  for (int r = w.res_ptr[col]; r < w.res_ptr[col + 1]; ++r) {
    const float rv = to_float(res_vals[r]);
    const T* xr = x + static_cast<int64_t>(w.res_rows[r]) * p.sxk;
#pragma unroll
    for (int e = 0; e < Run; ++e) {
      if (m0 + e < p.M) v[e] += to_float(xr[(m0 + e) * p.sxm]) * rv;
    }
  }
}

template <typename T, int Run>
__device__ __forceinline__ void add_bias_residual_run(float (&v)[Run], int col, int64_t m0, const PackedTile& w,
                                                      const Problem& p) {
  add_bias_residual_run<T, Run>(v, col, column_bias<T>(p, col), m0, w, p);
}

// Shared-memory reads in the shared state space. Read through generic pointers, the staging loads after each
// global store of an epilogue waited for that store, as if they could alias it: a 64 x 128 tile took several
// times as long to leave as its bytes need.
__device__ __forceinline__ float4 ld_shared_f4(const float* src) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(smem_addr(src)));
  return v;
}
__device__ __forceinline__ float2 ld_shared_f2(const float* src) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(smem_addr(src)));
  return v;
}
// Two adjacent T values of shared memory (4-byte aligned), widened to fp32.
template <typename T>
__device__ __forceinline__ float2 ld_shared_pair(const T* src) {
  uint32_t word;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(word) : "r"(smem_addr(src)));
  T pair[2];
  memcpy(pair, &word, sizeof(word));
  return make_float2(to_float(pair[0]), to_float(pair[1]));
}
__device__ __forceinline__ float ld_shared_f32(const float* src) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(smem_addr(src)));
  return v;
}
__device__ __forceinline__ int ld_shared_s32(const int* src) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(smem_addr(src)));
  return v;
}

// Eight consecutive floats from 16-byte-aligned shared memory. Runs 32 floats apart share banks, so when eight
// lanes read eight consecutive runs, the lanes with bit 2 of `lane_run` set take their two halves in swapped
// order: each quarter-warp then touches all 32 banks once per 16-byte read.
__device__ __forceinline__ void load8_shared(const float* src, int lane_run, float (&v)[8]) {
  const bool swap = (lane_run >> 2) & 1;
  const float4 a = ld_shared_f4(src + (swap ? 4 : 0));
  const float4 b = ld_shared_f4(src + (swap ? 0 : 4));
  const float4 lo = swap ? b : a, hi = swap ? a : b;
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

// One 16-byte store of eight outputs to global memory (y is always a global tensor).
template <typename T>
__device__ __forceinline__ void store8(T* dst, const float (&v)[8]) {
  alignas(16) T out[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = from_float<T>(v[e]);
  const uint4 q = *reinterpret_cast<const uint4*>(out);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(q.x), "r"(q.y), "r"(q.z), "r"(q.w)
               : "memory");
}

// Stores outputs m0 .. m0+7 of column col of a feature-major y: one 16-byte store, or element by element at the
// tail of M or on an unaligned y.
template <typename T>
__device__ __forceinline__ void store_column_run(const float (&v)[8], int col, int64_t m0, const Problem& p) {
  T* dst = static_cast<T*>(p.y) + static_cast<int64_t>(col) * p.syn + m0;
  if (p.y_vec16 && m0 + 8 <= p.M) {
    store8(dst, v);
  } else {
    for (int e = 0; e < 8 && m0 + e < p.M; ++e) dst[e] = from_float<T>(v[e]);
  }
}

// Finishes outputs m0 .. m0+7 of column col of a feature-major y (bias, residual, activation) and stores them.
template <typename T>
__device__ __forceinline__ void finish_column_run(float (&v)[8], int col, float bias, int64_t m0,
                                                  const PackedTile& w, const Problem& p) {
  add_bias_residual_run<T, 8>(v, col, bias, m0, w, p);
  activate_run(v, p.activation);
  store_column_run<T>(v, col, m0, p);
}

// Finishes output (m, col) of y, in either orientation (bias, residual, activation), and stores it.
template <typename T>
__device__ __forceinline__ void finish_output(float (&v)[1], int col, float bias, int64_t m, const PackedTile& w,
                                              const Problem& p) {
  add_bias_residual_run<T, 1>(v, col, bias, m, w, p);
  activate_run(v, p.activation);
  static_cast<T*>(p.y)[m * p.sym + static_cast<int64_t>(col) * p.syn] = from_float<T>(v[0]);
}

// A finished fp32 BM x BN tile staged in shared memory before it leaves through `cols`. The layout follows the
// output's orientation, so that the fragment stores into it are conflict-free and the global stores are whole
// 16-byte runs along y's contiguous dimension: rows of BN (+8 pad) for a row-major y; columns of BM (+4 pad)
// for a feature-major y, whose columns are contiguous in m. Storing a feature-major y from a row-major staging
// put every lane of a warp on a different column and made the epilogue cost several times the MMAs.
template <int BM, int BN>
struct StagedTile {
  static constexpr int kRowLd = BN + 8, kColLd = BM + 4;
  static constexpr int kFloats = BM * kRowLd > BN * kColLd ? BM * kRowLd : BN * kColLd;
  static constexpr int kBytes = kFloats * 4 + BN * 8;  // + the tile's column list and their biases
  static_assert(BM % 16 == 0 && BN % 32 == 0, "pads chosen for these multiples");

  // Stores the accumulator pair (r, n), (r, n + 1): a conflict-free float2 (row-major: bank 8g + 2t4), or two
  // words (column-major: bank 8t4 + g for fragment row g and column pair t4).
  __device__ __forceinline__ static void put(float* s, int r, int n, float v0, float v1, bool feature_major) {
    if (feature_major) {
      s[n * kColLd + r] = v0;
      s[(n + 1) * kColLd + r] = v1;
    } else {
      *reinterpret_cast<float2*>(s + r * kRowLd + n) = make_float2(v0, v1);
    }
  }
  // The tile's column list, behind the values; F is float, or const float to read.
  template <typename F>
  __device__ __forceinline__ static auto cols(F* s) {
    return reinterpret_cast<std::conditional_t<std::is_const_v<F>, const int, int>*>(s + kFloats);
  }
  // The bias of each column of the tile, behind its column list.
  template <typename F>
  __device__ __forceinline__ static F* biases(F* s) {
    return s + kFloats + BN;
  }

  // Stages the tile's output columns and, with a bias, their bias values in fp32; threads tid = 0 .. kThreads-1
  // share the work. Read once per tile, the bias costs the store loop a shared-memory load per run instead of a
  // global one.
  template <typename T, int kThreads>
  __device__ __forceinline__ static void stage_columns(float* s, const PackedTile& w, const Problem& p, int tile,
                                                       int tid) {
    const T* bias = static_cast<const T*>(p.bias);
    for (int n = tid; n < BN; n += kThreads) {
      const int col = w.cols[tile * BN + n];
      cols(s)[n] = col;
      if (bias != nullptr) biases(s)[n] = col >= 0 ? to_float(bias[col]) : 0.0f;
    }
  }
};

// Adds a tile staged by StagedTile (split-K partial sums) into the fp32 workspace, whose layout follows y's, so
// consecutive threads go along its contiguous dimension, four floats per atomic (sm_90 vector atomics). A rolled
// loop: unrolled per-fragment atomics made the kernels' code several times larger.
template <int BM, int BN, int kThreads>
__device__ __forceinline__ void add_partial_tile(const float* s_c, const PackedTile& w, const Problem& p,
                                                 int64_t m0, int tile, bool feature_major_out, int tid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Staged = StagedTile<BM, BN>;
  const int64_t pos0 = static_cast<int64_t>(tile) * BN;
  // Along m (feature-major) a quad needs M % 4 == 0 to stay 16-byte aligned; along the tile's columns it always is.
  const bool quads = !feature_major_out || p.M % 4 == 0;
#pragma unroll 1
  for (int it = tid; it < BM * BN / 4; it += kThreads) {
    const int r = feature_major_out ? (it % (BM / 4)) * 4 : it / (BN / 4);
    const int n = feature_major_out ? it / (BM / 4) : (it % (BN / 4)) * 4;
    const float* src = feature_major_out ? s_c + n * Staged::kColLd + r : s_c + r * Staged::kRowLd + n;
    const float4 v = ld_shared_f4(src);
    float* dst = p.workspace + ws_index(w, p, m0 + r, pos0 + n);
    if (quads && m0 + r + (feature_major_out ? 3 : 0) < p.M) {
      atomicAdd(reinterpret_cast<float4*>(dst), v);
    } else if (feature_major_out) {  // the tail of M, or an M that is not a multiple of 4
      const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (m0 + r + q < p.M) atomicAdd(dst + q, e[q]);
      }
    }
  }
#endif
}

// Writes a tile staged by StagedTile (values, then the column list and biases of stage_columns) through its column
// list, applying bias, TEW residual and activation; threads tid = 0 .. kThreads-1 share the work. x is
// feature-major here: x[k*ldx + m].
template <typename T, int BM, int BN, int kThreads>
__device__ __forceinline__ void store_tile(const float* s_c, const PackedTile& w, const Problem& p, int64_t m0,
                                           bool feature_major_out, int tid) {
  using Staged = StagedTile<BM, BN>;
  const int64_t M = p.M;
  const int* s_cols = Staged::cols(s_c);
  const float* s_bias = Staged::biases(s_c);
  if (feature_major_out) {  // y[col*syn + m]: a run of 8 consecutive m per thread, consecutive lanes along m
    constexpr int kRuns = BM / 8;
    // One loop per activation, and per finishing (none, the staged bias, or bias and TEW residual from global
    // memory): with every finishing step in one loop body, four warps took several times the stores' own time to
    // issue it.
    const auto runs = [&](auto finish) {
      for (int it = tid; it < kRuns * BN; it += kThreads) {
        const int c = it % kRuns, n = it / kRuns;
        const int col = ld_shared_s32(s_cols + n);
        const int64_t mbase = m0 + c * 8;
        if (col < 0 || mbase >= M) continue;
        float v[8];
        load8_shared(s_c + n * Staged::kColLd + c * 8, c, v);
        finish(v, col, mbase, n);
      }
    };
    with_activation(p.activation, [&](auto act) {
      constexpr Activation kAct = decltype(act)::value;
      if (w.res_ptr == nullptr && p.bias == nullptr) {
        runs([&](float(&v)[8], int col, int64_t m, int) {
          activate_fixed<kAct>(v);
          store_column_run<T>(v, col, m, p);
        });
      } else if (w.res_ptr == nullptr) {
        runs([&](float(&v)[8], int col, int64_t m, int n) {
          const float b = ld_shared_f32(s_bias + n);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e] += b;
          activate_fixed<kAct>(v);
          store_column_run<T>(v, col, m, p);
        });
      } else {
        runs([&](float(&v)[8], int col, int64_t m, int) {
          add_bias_residual_run<T, 8>(v, col, m, w, p);
          activate_fixed<kAct>(v);
          store_column_run<T>(v, col, m, p);
        });
      }
    });
  } else {  // y[m*sym + col]: a run of 8 contiguous, aligned columns goes out as one 16-byte store
    constexpr int kRuns = BN / 8;
    with_activation(p.activation, [&](auto act) {
      constexpr Activation kAct = decltype(act)::value;
      for (int it = tid; it < BM * kRuns; it += kThreads) {
        const int r = it / kRuns, q = it % kRuns, n0 = q * 8;
        const int64_t m = m0 + r;
        const int col0 = ld_shared_s32(s_cols + n0);
        if (col0 < 0 || m >= M) continue;
        float v[8];
        load8_shared(s_c + r * Staged::kRowLd + n0, q, v);
        T* row = static_cast<T*>(p.y) + m * p.sym;
        if (p.y_vec16 && w.res_ptr == nullptr && col0 % 8 == 0 && ld_shared_s32(s_cols + n0 + 7) == col0 + 7) {
          // Eight adjacent columns (every run of a weight that keeps whole tiles of columns, as vector-wise N:M).
          if (p.bias != nullptr) {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] += ld_shared_f32(s_bias + n0 + e);
          }
          activate_fixed<kAct>(v);
          store8(row + col0, v);
          continue;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int col = ld_shared_s32(s_cols + n0 + e);
          float out[1] = {col < 0 ? 0.0f : v[e]};
          if (col >= 0) add_bias_residual_run<T, 1>(out, col, m, w, p);
          v[e] = out[0];
        }
        activate_fixed<kAct>(v);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int col = ld_shared_s32(s_cols + n0 + e);
          if (col >= 0) row[static_cast<int64_t>(col) * p.syn] = from_float<T>(v[e]);
        }
      }
    });
  }
}

// Outputs of column col, whose partial sums sit at workspace position pos (-1: a pruned column, zero before bias
// and residual): Run = 8, outputs m0 .. m0+7 of a feature-major y; Run = 1, output m0 of a row-major one.
template <typename T, int Run>
__device__ __forceinline__ void finalize_run(const PackedTile& w, const Problem& p, int64_t m0, int col, int pos,
                                             float bias) {
  static_assert(Run == 1 || Run == 8, "runs of 8 along a feature-major y, single outputs along a row-major one");
  float v[Run];
#pragma unroll
  for (int e = 0; e < Run; ++e) {
    const int64_t m = m0 + e;
    v[e] = pos >= 0 && m < p.M ? p.workspace[ws_index(w, p, m, pos)] : 0.0f;
  }
  if constexpr (Run == 8) {
    finish_column_run<T>(v, col, bias, m0, w, p);
  } else {
    finish_output<T>(v, col, bias, m0, w, p);
  }
}

// Finalize work: every column after a split-K/GEMV pass (all_columns), else only the pruned ones. Counted in
// runs of 8 consecutive m along a feature-major y, in single outputs along a row-major one.
__device__ __host__ __forceinline__ int64_t finalize_outputs(const PackedTile& w, const Problem& p, bool all_columns) {
  const int64_t ncols = all_columns ? w.N : w.num_pruned;
  return ncols * (p.sym == 1 ? (p.M + 7) / 8 : p.M);
}

// Worker `worker` of `workers` walking an outer_n x inner_n grid of work: positions worker, worker + workers, ...
// in row-major order, stepped with a carry instead of a division per step. Empty when there is no work
// (inner_n = 0) or no share of it (workers = 0). The sides are at most M and N and the workers are threads of one
// launch, so 32-bit positions suffice, which keeps the walk to few registers in the kernels that end with one.
struct StridedWalk {
  __device__ __host__ __forceinline__ StridedWalk(int64_t outer_n, int64_t inner_n, int64_t worker, int64_t workers)
      : outer_n_(static_cast<int>(inner_n == 0 || workers <= 0 ? 0 : outer_n)), inner_n_(static_cast<int>(inner_n)) {
    const int64_t per = inner_n > 0 ? inner_n : 1;
    d_outer_ = static_cast<int>(workers / per);
    d_inner_ = static_cast<int>(workers % per);
    outer = static_cast<int>(worker / per);
    inner = static_cast<int>(worker % per);
  }
  __device__ __host__ __forceinline__ bool done() const { return outer >= outer_n_; }
  // Moves to the worker's next position; only while !done().
  __device__ __host__ __forceinline__ void advance() {
    outer += d_outer_;
    inner += d_inner_;
    if (inner >= inner_n_) {
      inner -= inner_n_;
      ++outer;
    }
  }
  int outer, inner;  // the current position

 private:
  int outer_n_, inner_n_, d_outer_, d_inner_;
};

// Worker `worker` of `workers` walks its share of the finalize work (bias, TEW residual, activation, and the
// workspace sums for all_columns) one output run at a time. Consecutive workers go along y's contiguous dimension,
// so the stores coalesce. The work (outer, inner) is (column, run of 8 m) for a feature-major y and (m, column) for
// a row-major one. Each step's column is loaded a step ahead, from the constructor on, and its bias by fetch_bias(),
// which a kernel may call well before step(): the GEMV builds its cursor before its main loop, so that these
// dependent loads do not wait one after another at the end of the kernel.
template <typename T>
class FinalizeCursor {
 public:
  __device__ __forceinline__ FinalizeCursor(const PackedTile& w, const Problem& p, bool all_columns, int64_t worker,
                                            int64_t workers)
      : all_columns_(all_columns),
        feature_major_(p.sym == 1),
        walk_(feature_major_ ? columns(w, all_columns) : p.M, feature_major_ ? (p.M + 7) / 8 : columns(w, all_columns),
              worker, workers) {
    fetch_column(w);
  }
  __device__ __forceinline__ bool done() const { return walk_.done(); }
  // Loads the current step's bias, which needs its column; step() does it if no earlier call has.
  __device__ __forceinline__ void fetch_bias(const Problem& p) {
    if (done() || has_bias_) return;
    bias_ = column_bias<T>(p, col_);
    has_bias_ = true;
  }
  // Finishes the current run and moves to the next one; only while !done().
  __device__ __forceinline__ void step(const PackedTile& w, const Problem& p) {
    fetch_bias(p);
    const int pos = all_columns_ ? w.col_pos[col_] : -1;
    if (feature_major_) {
      finalize_run<T, 8>(w, p, static_cast<int64_t>(walk_.inner) * 8, col_, pos, bias_);
    } else {
      finalize_run<T, 1>(w, p, walk_.outer, col_, pos, bias_);
    }
    walk_.advance();
    has_bias_ = false;
    fetch_column(w);
  }

 private:
  __device__ __forceinline__ static int64_t columns(const PackedTile& w, bool all_columns) {
    return all_columns ? w.N : w.num_pruned;
  }
  __device__ __forceinline__ void fetch_column(const PackedTile& w) {
    if (done()) return;
    const int j = feature_major_ ? walk_.outer : walk_.inner;
    col_ = all_columns_ ? j : w.pruned_cols[j];
  }
  bool all_columns_, feature_major_, has_bias_ = false;
  StridedWalk walk_;
  int col_ = -1;
  float bias_ = 0.0f;
};

// The pruned columns of a feature-major y (bias, TEW residual, activation), written by whole warps, one chunk of
// kChunk consecutive outputs of one column per step: without a residual the chunk is one constant, so a step is
// kRunsPerLane independent 16-byte stores per lane. Per-thread runs of 8 outputs paid two dependent loads for every
// store. Warp `warp` of `warps` walks the (pruned column, chunk) grid; the step is warp-uniform, so a warp stays
// converged. The column indices and biases of a warp's next 32 steps are loaded together, one step per lane, and
// handed out by shuffle: loading them step by step put two dependent loads' latency on every step (ncu, BERT QKV at
// 75%: a ninth of the warp-specialized kernel's stall samples sat on that column-index load).
template <typename T>
class PrunedColumnFill {
 public:
  static constexpr int kRunsPerLane = 4, kChunk = 32 * 8 * kRunsPerLane;

  __device__ __forceinline__ PrunedColumnFill(const PackedTile& w, const Problem& p, int64_t warp, int64_t warps)
      : walk_(w.num_pruned, chunks(p), warp, warps),
        lane_walk_(w.num_pruned, chunks(p), warp + (threadIdx.x & 31) * warps, 32 * warps) {
    prefetch(w, p);
  }
  __device__ __forceinline__ bool done() const { return walk_.done(); }
  // Writes the current chunk and moves to the next one; only while !done().
  __device__ __forceinline__ void step(const PackedTile& w, const Problem& p) {
    const int col = __shfl_sync(0xffffffffu, lane_col_, slot_);
    const float bias = __shfl_sync(0xffffffffu, lane_bias_, slot_);
    const int64_t m_lane = static_cast<int64_t>(walk_.inner) * kChunk + (threadIdx.x & 31) * 8;
    if (w.res_ptr == nullptr) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = bias;
      activate_run(v, p.activation);
#pragma unroll
      for (int r = 0; r < kRunsPerLane; ++r) {
        if (m_lane + r * 256 < p.M) store_column_run<T>(v, col, m_lane + r * 256, p);
      }
    } else {
#pragma unroll 1
      for (int r = 0; r < kRunsPerLane; ++r) {
        float v[8] = {};
        if (m_lane + r * 256 < p.M) finish_column_run<T>(v, col, bias, m_lane + r * 256, w, p);
      }
    }
    walk_.advance();
    if (++slot_ == 32) {
      slot_ = 0;
      prefetch(w, p);
    }
  }

 private:
  __device__ __forceinline__ static int64_t chunks(const Problem& p) { return (p.M + kChunk - 1) / kChunk; }
  // This lane's step of the warp's next 32: its column index and bias (0 past the warp's last step).
  __device__ __forceinline__ void prefetch(const PackedTile& w, const Problem& p) {
    lane_col_ = 0;
    lane_bias_ = 0.0f;
    if (lane_walk_.done()) return;
    lane_col_ = w.pruned_cols[lane_walk_.outer];
    if (p.bias != nullptr) lane_bias_ = to_float(static_cast<const T*>(p.bias)[lane_col_]);
    lane_walk_.advance();
  }
  StridedWalk walk_, lane_walk_;  // the warp's steps; this lane's, 32 steps apart
  int slot_ = 0, lane_col_;
  float lane_bias_;
};

// True when the warp-specialized kernel writes the pruned columns itself (a feature-major y without split-K), so
// the launch needs no finalize pass.
__device__ __host__ __forceinline__ bool fills_pruned_columns(const Problem& p, int splits) {
  return splits == 1 && p.sym == 1;
}

template <typename T>
__device__ __forceinline__ void finalize_share(const PackedTile& w, const Problem& p, bool all_columns,
                                               int64_t worker, int64_t workers) {
  FinalizeCursor<T> cursor(w, p, all_columns, worker, workers);
  while (!cursor.done()) cursor.step(w, p);
}

// Thread `thread` of `threads` (whole warps, numbered consecutively) writes its share of the pruned columns: by
// whole warps along a feature-major y past kSmallM rows (PrunedColumnFill), else one run of outputs per thread
// (at small M a warp per column left most lanes idle and walked its columns one dependent step after another).
// A kernel that only ever runs at small M passes LargeM = false, so it carries no code for the warp fill.
template <typename T, bool LargeM = true>
__device__ __forceinline__ void fill_pruned_share(const PackedTile& w, const Problem& p, int64_t thread,
                                                  int64_t threads) {
  if constexpr (LargeM) {
    if (p.sym == 1 && p.M > kSmallM) {
      PrunedColumnFill<T> fill(w, p, thread / 32, threads / 32);
      while (!fill.done()) fill.step(w, p);
      return;
    }
  }
  finalize_share<T>(w, p, false, thread, threads);
}

// Programmatic dependent launch (sm_90): a kernel that launch_kernel starts as a dependent may begin while the
// kernel before it in the stream is still running, and calls wait_for_prerequisite_grid before it reads what that
// kernel writes; a kernel that is followed that way calls allow_dependent_launch once all of its CTAs are resident,
// so that the dependent's CTAs are already waiting when it ends instead of being launched then. Both are no-ops
// before sm_90.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Stores v into the shared memory of CTA `rank` of this cluster, at the address `local` has in this CTA.
__device__ __forceinline__ void store_to_cluster_cta(float* local, int rank, float v) {
#if __CUDA_ARCH__ >= 900
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
#else
  __trap();  // the host launches clusters only on sm_90 and later
#endif
}

// Barrier of every thread of the cluster; what each wrote into any CTA's shared memory before it is visible after.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The two halves of a barrier of every thread of the cluster that only says every CTA has started: arrive when the
// kernel starts, wait before the first store into another CTA's shared memory (which must not precede its start).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// True on devices of compute capability 9.0 and later (programmatic dependent launches, clusters), per device.
inline bool sm90_or_later() {
  constexpr int kMaxDevices = 64;
  static int major[kMaxDevices] = {};  // 0: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return false;
  if (major[device] == 0 && cudaDeviceGetAttribute(&major[device], cudaDevAttrComputeCapabilityMajor, device) !=
                                cudaSuccess) {
    return false;
  }
  return major[device] >= 9;
}

// A launch's configuration: grid, CTA, dynamic shared memory and stream; as a programmatic dependent of the
// stream's previous kernel when `dependent` and the device supports it, and in clusters of `cluster` consecutive CTAs
// along x where cluster > 1 (sm_90 and later). A dependent kernel calls wait_for_prerequisite_grid before it reads
// anything that kernel writes; only a kernel of the same call may precede it that way, since what the kernel reads
// before its wait must not come from the kernel before it.
class LaunchConfig {
 public:
  LaunchConfig(dim3 grid, dim3 block, int smem, cudaStream_t stream, bool dependent, int cluster = 1) {
    int n = 0;
    if (dependent && sm90_or_later()) {
      attrs_[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs_[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
      attrs_[n].id = cudaLaunchAttributeClusterDimension;
      attrs_[n].val.clusterDim.x = static_cast<unsigned>(cluster);
      attrs_[n].val.clusterDim.y = attrs_[n].val.clusterDim.z = 1;
      ++n;
    }
    config_.gridDim = grid;
    config_.blockDim = block;
    config_.dynamicSmemBytes = static_cast<size_t>(smem);
    config_.stream = stream;
    config_.attrs = attrs_;
    config_.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;  // config_ points at attrs_
  LaunchConfig& operator=(const LaunchConfig&) = delete;

  const cudaLaunchConfig_t* get() const { return &config_; }

  template <typename... Params, typename... Args>
  const char* launch(void (*kernel)(Params...), Args... args) const {
    const cudaError_t err = cudaLaunchKernelEx(&config_, kernel, args...);
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
  }

 private:
  cudaLaunchAttribute attrs_[2]{};
  cudaLaunchConfig_t config_{};
};

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent when `dependent`.
template <typename... Params, typename... Args>
const char* launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream,
                          bool dependent, Args... args) {
  return LaunchConfig(grid, block, smem, stream, dependent).launch(kernel, args...);
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

// Calls run(Cfg{}) with the first CTA configuration among Cfgs whose columns are the tile width G, whose rows are the
// plan's row block and that `accept`s the call: both Hopper kernels choose among their configurations this way.
template <typename... Cfgs, typename Run, typename Accept>
const char* with_tile_config(const PackedTile& w, const Plan& plan, Run run, Accept accept) {
  const char* result = "no CTA configuration for this tile width and row block";
  const auto try_config = [&](auto cfg) {
    using Cfg = decltype(cfg);
    if (Cfg::kBN != w.granularity || Cfg::kBM != plan.block_m || !accept(cfg)) return false;
    result = run(cfg);
    return true;
  };
  static_cast<void>((try_config(Cfgs{}) || ...));
  return result;
}
template <typename... Cfgs, typename Run>
const char* with_tile_config(const PackedTile& w, const Plan& plan, Run run) {
  return with_tile_config<Cfgs...>(w, plan, run, [](auto) { return true; });
}

// Launches a TW GEMM kernel (mma.sync or wgmma) with one CTA per (tile, M block, K split). `Cfg` gives the CTA
// rows, threads and dynamic shared memory.
template <typename Cfg, auto kKernel>
const char* launch_tiles(const PackedTile& w, const Problem& p, int splits) {
  if (const char* err = allow_dynamic_smem<kKernel, Cfg::kSmemBytes>()) return err;
  const int m_blocks = cdiv(p.M, Cfg::kBM);
  const int64_t ctas = static_cast<int64_t>(w.num_tiles) * m_blocks * splits;
  return launch_kernel(kKernel, dim3(static_cast<unsigned>(ctas)), dim3(Cfg::kThreads), Cfg::kSmemBytes, p.stream,
                       p.x_from_prior_kernel, w, p, m_blocks, splits, p.sym == 1);
}

// Implemented in tw_gemv.cu: the plan for M <= kSmallM (kGemv, or kGemvMma above kGemvMaxM rows of an x with
// 16-byte rows, which the binding transposes a row-major x into), and its launch.
Plan gemv_plan(const PackedTile& w, const Problem& p);
// Past kSmallM rows (x feature-major with 16-byte rows), the tensor-core GEMV's plan where it takes the call: forced
// (Path::kGemvMma), or chosen up to kMmaGemvMaxM rows where it beats the GEMM kernels; nullopt leaves them the call.
std::optional<Plan> mma_gemv_plan(const PackedTile& w, const Problem& p);
const char* launch_gemv(const PackedTile& w, const Problem& p, const Plan& plan);
// Implemented in tw_gemm_sm90.cu.
// True when the wgmma kernels hold sm_90a machine code that this (Hopper) device runs.
bool wgmma_available();
// Launches the wgmma kernel chosen by `plan` (G 64 or 128); returns an error message or nullptr.
const char* launch_wgmma(const PackedTile& w, const Problem& p, const Plan& plan);
// Implemented in tw_gemm_sm90_ws.cu: the warp-specialized, persistent wgmma kernel (same contract).
const char* launch_wgmma_ws(const PackedTile& w, const Problem& p, const Plan& plan);
// Implemented in tw_gemm_sm90_rows.cu: the row-flexible kernel (kWgmmaRows), and why it cannot take a call (nullptr
// when it can): it needs G 64/128, a feature-major y without TEW residual, at most 64 tiles and host_tile_ptr.
const char* launch_wgmma_rows(const PackedTile& w, const Problem& p);
const char* rows_unsupported(const PackedTile& w, const Problem& p);
// Whether the row-flexible kernel's planned schedule promises enough over 128-row items of the warp-specialized
// kernel for `auto` to take it (kRowsPayPercent); false where it cannot take the call.
bool rows_schedule_pays(const PackedTile& w, const Problem& p);
// Whether the warp-specialized configuration for (G, block_m) finishes items only into a feature-major y without
// split-K or TEW residual (its epilogue buffers gave their room to another ring stage).
bool ws_needs_direct_epilogue(int granularity, int block_m);

}  // namespace tw
}  // namespace sparseprune
