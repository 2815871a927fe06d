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

}  // namespace nm
}  // namespace sparseprune
