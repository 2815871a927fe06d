// Residual add and LayerNorm over the features of a feature-major (H, T) activation, the layout the TW kernels read
// and write: host-side interface shared by the torch binding and layer_norm.cu, free of torch headers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sparseprune {
namespace norm {

enum class DType : int { kHalf = 0, kBFloat16 = 1 };

// out[h, t] = LayerNorm over h of (x + residual)[:, t] * weight[h] + bias[h]. x, residual and out are (H, T)
// contiguous; weight and bias [H]; all of one dtype. The sum rounds to the dtype first, as torch's `x + residual`
// does, and the statistics are exact two-pass fp32, as torch's LayerNorm computes them.
struct Problem {
  const void* x;
  const void* residual;
  const void* weight;
  const void* bias;
  void* out;
  int64_t H, T;
  float eps;
  DType dtype;
  cudaStream_t stream;
};

// Every thread holds its share of a token's features in registers: H a multiple of kHStep up to kMaxH.
constexpr int64_t kHStep = 64;
constexpr int64_t kMaxH = 1024;
inline bool supports(int64_t H) { return H > 0 && H % kHStep == 0 && H <= kMaxH; }

// Launches the kernel; returns nullptr on success, else a static error message (the launch is checked).
const char* launch_add_layer_norm(const Problem& p);

}  // namespace norm
}  // namespace sparseprune
