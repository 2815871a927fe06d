// im2col of a convolution input straight into the feature-major layout the TW kernels read: host-side interface
// shared by the torch binding and im2col.cu, free of torch headers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sparseprune {
namespace im2col {

// x (B, C, H, W) with any element strides, 2-byte elements (fp16/bf16: the kernel only copies bits); out (K, M)
// contiguous with K = C*kh*kw (ordered c, then i, then j, as F.unfold) and M = B*oh*ow (ordered b, oh, ow).
struct Problem {
  const uint16_t* x;
  int64_t stride_b, stride_c, stride_h, stride_w;
  int batch, channels, height, width;
  int kh, kw, dh, dw, ph, pw, sh, sw;
  int out_h, out_w;
  uint16_t* out;
  cudaStream_t stream;
};

// Which kernel writes the matrix: kAuto picks by the problem's size (im2col.cu); the others force one, so that
// tests cover each kernel at every geometry and benchmarks time them side by side.
enum class Kernel { kAuto, kStaged, kDirect, kDirectSpread };

// Launches the copy; returns nullptr on success, else a static error message (the launch is checked). Needs
// M = B*oh*ow < 2^31.
const char* launch_im2col_feature_major(const Problem& p, Kernel kernel = Kernel::kAuto);

}  // namespace im2col
}  // namespace sparseprune
