// im2col into the feature-major layout (see im2col.h). One thread owns 8 consecutive outputs m of one input channel
// and writes them for every kernel tap of that channel: the (b, oh, ow) of its outputs are worked out once (integer
// divisions by runtime sizes dominated a version that did so per row), and each row's 8 values leave in one 16-byte
// store. The reads walk along the input's rows through L1/L2 (each input element serves kh*kw rows). F.unfold writes
// (B, K, L) and a second pass makes it (K, B*L); this is one pass.
#include "im2col.h"

namespace sparseprune {
namespace im2col {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;        // outputs per thread and row: one 16-byte store
constexpr int kMaxGridRows = 65535;  // gridDim.y limit: channels beyond it are walked by the same blocks

__global__ void __launch_bounds__(kThreads) im2col_feature_major_kernel(Problem p) {
  const int m_total = p.batch * p.out_h * p.out_w;
  const int m0 = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
  if (m0 >= m_total) return;
  const int plane = p.out_h * p.out_w;
  const bool vector_store = m_total % kPerThread == 0 && m0 + kPerThread <= m_total;  // 16-byte aligned rows
  int64_t image[kPerThread];  // offset of each output's image in x, or -1 past the end
  int top[kPerThread], left[kPerThread];  // input row and column of each output's first kernel tap
  {
    int b = m0 / plane, oh = (m0 % plane) / p.out_w, ow = m0 % p.out_w;
#pragma unroll
    for (int t = 0; t < kPerThread; ++t) {
      image[t] = m0 + t < m_total ? b * p.stride_b : -1;
      top[t] = oh * p.sh - p.ph;
      left[t] = ow * p.sw - p.pw;
      if (++ow == p.out_w) {
        ow = 0;
        if (++oh == p.out_h) oh = 0, ++b;
      }
    }
  }
  for (int c = blockIdx.y; c < p.channels; c += gridDim.y) {
    const uint16_t* x_c = p.x + c * p.stride_c;
    uint16_t* out = p.out + static_cast<int64_t>(c) * p.kh * p.kw * m_total + m0;
    for (int i = 0; i < p.kh; ++i) {
      for (int j = 0; j < p.kw; ++j, out += m_total) {
        uint16_t v[kPerThread];
#pragma unroll
        for (int t = 0; t < kPerThread; ++t) {
          const int y = top[t] + i * p.dh, x = left[t] + j * p.dw;
          const bool inside = image[t] >= 0 && y >= 0 && y < p.height && x >= 0 && x < p.width;
          v[t] = inside ? __ldg(x_c + image[t] + y * p.stride_h + x * p.stride_w) : uint16_t{0};
        }
        if (vector_store) {
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
                  static_cast<unsigned>(p.channels < kMaxGridRows ? p.channels : kMaxGridRows));
  im2col_feature_major_kernel<<<grid, kThreads, 0, p.stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace im2col
}  // namespace sparseprune
