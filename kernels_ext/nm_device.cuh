// Device helpers shared by the N:M kernels (nm_gemm.cu, nm_gemv_mma.cu) and bench/probes/nm_spmv_anatomy.cu.
#pragma once

#include "nm_gemm.h"
#include "tw_device.cuh"

namespace sparseprune {
namespace nm {

// n / d for a divisor d >= 1 by one high multiply: magic = ceil(2^32 / d) is exact while n * (magic * d - 2^32) <
// 2^32, so for every n < 2^32 / d (the callers' packed rows of a chunk or a step are far fewer). The division it
// replaces was 20 instructions per packed row in the SpMV.
struct Divisor {
  int d;
  uint32_t magic;
  __device__ explicit Divisor(int divisor) : d(divisor), magic(divisor > 1 ? 0xffffffffu / divisor + 1u : 0u) {}
  __device__ __forceinline__ int operator()(int n) const {
    return d > 1 ? static_cast<int>(__umulhi(static_cast<uint32_t>(n), magic)) : n;
  }
};

// How a lane finds its 8 columns' in-group positions: 8 nibbles or 8 bytes of an element-wise packing, or a
// vector-wise packing's bytes, one per `vector` columns.
enum class Positions { kNibbles, kBytes, kVectorBytes };

// A packed row's 8 in-group positions (one word of nibbles in .x, or two of bytes) as byte offsets of their fp32 x
// inside the row's group, masked into the group (a corrupt index stays in it): one byte per column in two words, so a
// column's offset is one byte permute. mask4 holds 4 (m - 1) in every byte. A shift, a mask, an add and a scale per
// column were about a third of the SpMV's instructions per packed row.
template <Positions P>
struct GroupOffsets {
  uint32_t bytes[2];
  __device__ __forceinline__ GroupOffsets(const uint2& word, uint32_t mask4) {
    if constexpr (P == Positions::kNibbles) {  // columns 0, 2, 4, 6 in bytes[0], 1, 3, 5, 7 in bytes[1]
      bytes[0] = (word.x << 2) & mask4;
      bytes[1] = (word.x >> 2) & mask4;
    } else {  // columns 0..3 in bytes[0], 4..7 in bytes[1]
      bytes[0] = (word.x << 2) & mask4;
      bytes[1] = (word.y << 2) & mask4;
    }
  }
  __device__ __forceinline__ int operator()(int e) const {
    if constexpr (P == Positions::kNibbles) return static_cast<int>(__byte_perm(bytes[e & 1], 0u, 0x4440u | (e >> 1)));
    return static_cast<int>(__byte_perm(bytes[e >> 2], 0u, 0x4440u | (e & 3)));
  }
};

// Offset of packed row `row`, column `col` among the values (and, scaled by idx_bits / 8, among the positions).
__device__ __forceinline__ int64_t packed_offset(const PackedNMView& w, int64_t row, int64_t col) {
  if (w.vector != 1) return row * w.N + col;
  const int64_t first = col / kPanel * kPanel;
  return first * w.rows + row * min(static_cast<int64_t>(kPanel), w.N - first) + (col - first);
}

// In-group position of packed row `row`, column `col`, masked into its group (a corrupt index stays inside it).
__device__ __forceinline__ int position_at(const PackedNMView& w, int64_t row, int64_t col) {
  if (w.vector != 1) return __ldg(w.idx + row * (w.N / w.vector) + col / w.vector) & (w.m - 1);
  const int64_t at = packed_offset(w, row, col);
  const int byte = __ldg(w.idx + (w.idx_bits == 4 ? at / 2 : at));
  return (w.idx_bits == 4 ? byte >> (4 * (at & 1)) : byte) & (w.m - 1);
}

// y(row, col) = act(v + bias[col]), in the call's dtype.
template <typename T>
__device__ __forceinline__ void store_output(const Problem& p, int64_t row, int64_t col, float v) {
  if (p.bias != nullptr) v += tw::to_float(static_cast<const T*>(p.bias)[col]);
  static_cast<T*>(p.y)[row * p.ldy + col] = tw::from_float<T>(tw::activate(v, p.activation));
}

// Adds up the Warps partial sums of a CTA's Cols columns from n0, staged in shared memory as [warp][row_stride]
// [Cols], for the M rows of x, and finishes each (bias, activation), or after a K split writes it to split
// blockIdx.y's workspace slice for the finalize pass. Every thread of the CTA takes a share of the outputs.
template <typename T, int Cols, int Warps>
__device__ __forceinline__ void finish_column_block(const float* partial, int row_stride, int64_t n0,
                                                    const PackedNMView& w, const Problem& p) {
  for (int t = threadIdx.x; t < p.M * Cols; t += blockDim.x) {
    const int row = t / Cols, c = t % Cols;
    const int64_t col = n0 + c;
    if (col >= w.N) continue;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < Warps; ++i) s += partial[(i * row_stride + row) * Cols + c];
    if (gridDim.y == 1) {
      store_output<T>(p, row, col, s);
    } else {
      p.workspace[(static_cast<int64_t>(blockIdx.y) * p.M + row) * w.N + col] = s;
    }
  }
}

}  // namespace nm
}  // namespace sparseprune
