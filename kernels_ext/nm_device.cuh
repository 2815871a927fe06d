// Device helpers shared by the N:M kernels (nm_gemm.cu, nm_gemv_mma.cu).
#pragma once

#include "nm_gemm.h"
#include "tw_device.cuh"

namespace sparseprune {
namespace nm {

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
