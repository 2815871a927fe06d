// im2col into the feature-major layout (see im2col.h): one thread writes 8 consecutive outputs of one row k, so every
// store is a 16-byte run of a row and the reads of a warp walk along the input's rows (stride 1) through L1/L2.
// F.unfold writes (B, K, L) and a second pass makes it (K, B*L); this is one pass.
#include "im2col.h"

namespace sparseprune {
namespace im2col {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;      // outputs per thread: one 16-byte store
constexpr int kMaxGridRows = 65535;  // gridDim.y limit: rows of out beyond it are walked by the same blocks

__global__ void __launch_bounds__(kThreads) im2col_feature_major_kernel(Problem p) {
  const int m_total = p.batch * p.out_h * p.out_w;
  const int m0 = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
  if (m0 >= m_total) return;
  const int plane = p.out_h * p.out_w;
  const int taps = p.kh * p.kw;
  const int rows = p.channels * taps;
  const bool vector_store = m_total % kPerThread == 0;  // rows of out then start 16-byte aligned
  for (int k = blockIdx.y; k < rows; k += gridDim.y) {
    const int c = k / taps, i = (k % taps) / p.kw, j = k % p.kw;
    const uint16_t* x_c = p.x + c * p.stride_c;
    const int y_shift = i * p.dh - p.ph, x_shift = j * p.dw - p.pw;
    int b = m0 / plane, oh = (m0 % plane) / p.out_w, ow = m0 % p.out_w;
    uint16_t v[kPerThread];
#pragma unroll
    for (int t = 0; t < kPerThread; ++t) {
      const int y = oh * p.sh + y_shift, x = ow * p.sw + x_shift;
      const bool inside = m0 + t < m_total && y >= 0 && y < p.height && x >= 0 && x < p.width;
      v[t] = inside ? __ldg(x_c + b * p.stride_b + y * p.stride_h + x * p.stride_w) : uint16_t{0};
      if (++ow == p.out_w) {
        ow = 0;
        if (++oh == p.out_h) oh = 0, ++b;
      }
    }
    uint16_t* out = p.out + static_cast<int64_t>(k) * m_total + m0;
    if (vector_store && m0 + kPerThread <= m_total) {
      uint4 packed;
      packed.x = v[0] | (uint32_t{v[1]} << 16);
      packed.y = v[2] | (uint32_t{v[3]} << 16);
      packed.z = v[4] | (uint32_t{v[5]} << 16);
      packed.w = v[6] | (uint32_t{v[7]} << 16);
      *reinterpret_cast<uint4*>(out) = packed;
    } else {
      for (int t = 0; t < kPerThread && m0 + t < m_total; ++t) out[t] = v[t];
    }
  }
}

}  // namespace

const char* launch_im2col_feature_major(const Problem& p) {
  const int64_t m_total = int64_t{p.batch} * p.out_h * p.out_w;
  const int64_t rows = int64_t{p.channels} * p.kh * p.kw;
  if (m_total >= (int64_t{1} << 31) || rows >= (int64_t{1} << 31)) return "im2col needs B*oh*ow and C*kh*kw < 2^31";
  if (m_total == 0 || rows == 0) return nullptr;
  const int64_t per_block = int64_t{kThreads} * kPerThread;
  const dim3 grid(static_cast<unsigned>((m_total + per_block - 1) / per_block),
                  static_cast<unsigned>(rows < kMaxGridRows ? rows : kMaxGridRows));
  im2col_feature_major_kernel<<<grid, kThreads, 0, p.stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace im2col
}  // namespace sparseprune
