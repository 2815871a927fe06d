// What the element-wise N:M SpMV's time at one row of x is made of: the SpMV of kernels_ext/nm_gemm.cu reduced to
// its M = 1 core (one 32-column panel per CTA, 4-bit positions, 16 rows per lane in batches of 4), and the same
// kernel with parts of its work left out. Built and timed by bench/nm_spmv_anatomy.py; not part of the extension.
#include <cuda_fp16.h>
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

namespace {

constexpr int kThreads = 256, kWarps = 8, kLanesN = 4, kCols = 8, kPanel = 32, kRowSlots = 64, kUnroll = 4;
constexpr int kMaxK = 4096;

// Which work a variant keeps. kWhole: x staged in shared memory as fp32 and read once per kept value (the SpMV).
// kLocalX: shared memory filled by each thread instead of staged from global memory (no reads of x from L2).
// kStagedXUnused: x staged, each value multiplied by its position instead of its x. kNoX: neither staged nor read.
// kBytesOnly: values summed and positions XORed: the weight's bytes and little else.
enum Part { kWhole, kLocalX, kStagedXUnused, kNoX, kBytesOnly };

struct Batch {
  uint4 values[kUnroll];
  uint32_t positions[kUnroll];
};

__device__ __forceinline__ void load_batch(Batch& b, const __half* panel_values, const uint8_t* panel_positions,
                                           int row, int rows) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int r = row + u * kRowSlots;
    if (r < rows) {
      b.values[u] = __ldg(reinterpret_cast<const uint4*>(panel_values + r * kPanel));
      b.positions[u] = __ldg(reinterpret_cast<const uint32_t*>(panel_positions + r * kPanel / 2));
    }
  }
}

template <Part P>
__global__ void __launch_bounds__(kThreads, 3)
    anatomy_kernel(const __half* values, const uint8_t* positions, const __half* x, __half* y, int K, int m,
                   int kept) {
  __shared__ __align__(16) float s_x[kMaxK];
  __shared__ float s_part[kWarps * kPanel];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_n = lane % kLanesN, slot = warp * (32 / kLanesN) + lane / kLanesN;
  const int rows = K / m * kept;
  const __half* panel_values = values + static_cast<int64_t>(blockIdx.x) * rows * kPanel + lane_n * kCols;
  const uint8_t* panel_positions = positions + static_cast<int64_t>(blockIdx.x) * rows * kPanel / 2 + lane_n * kCols / 2;
  float acc[kCols] = {};
  unsigned bits = 0;
  Batch b;
  load_batch(b, panel_values, panel_positions, slot, rows);
  if constexpr (P == kWhole || P == kStagedXUnused) {
    for (int i = tid; i < K / 8; i += kThreads) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(x) + i);
      const __half* h = reinterpret_cast<const __half*>(&q);
      float4* d = reinterpret_cast<float4*>(s_x + 8 * i);
      d[0] = make_float4(__half2float(h[0]), __half2float(h[1]), __half2float(h[2]), __half2float(h[3]));
      d[1] = make_float4(__half2float(h[4]), __half2float(h[5]), __half2float(h[6]), __half2float(h[7]));
    }
    __syncthreads();
  } else if constexpr (P == kLocalX) {
    for (int i = tid; i < K; i += kThreads) s_x[i] = static_cast<float>(i & 7) - 3.5f;
    __syncthreads();
  }
  const uint32_t by_kept = kept > 1 ? 0xffffffffu / kept + 1u : 0u;
  for (int row = slot; row < rows; row += kRowSlots * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int r = row + u * kRowSlots;
      if (r >= rows) break;
      const int base = (kept > 1 ? static_cast<int>(__umulhi(static_cast<uint32_t>(r), by_kept)) : r) * m;
      const __half* w = reinterpret_cast<const __half*>(&b.values[u]);
      bits ^= b.positions[u];
#pragma unroll
      for (int e = 0; e < kCols; ++e) {
        const int pos = (b.positions[u] >> (4 * e)) & (m - 1);
        if constexpr (P == kWhole || P == kLocalX) {
          acc[e] += s_x[base + pos] * __half2float(w[e]);
        } else if constexpr (P == kBytesOnly) {
          acc[e] += __half2float(w[e]);
        } else {
          acc[e] += static_cast<float>(base + pos) * __half2float(w[e]);
        }
      }
    }
    if (row + kRowSlots * kUnroll < rows) load_batch(b, panel_values, panel_positions, row + kRowSlots * kUnroll, rows);
  }
  acc[0] += bits == 0x9e3779b9u ? 1.0f : 0.0f;  // keeps the position loads of kBytesOnly alive
#pragma unroll
  for (int e = 0; e < kCols; ++e) {
#pragma unroll
    for (int off = kLanesN; off < 32; off <<= 1) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
  }
  if (lane < kLanesN) {
#pragma unroll
    for (int e = 0; e < kCols; ++e) s_part[warp * kPanel + lane * kCols + e] = acc[e];
  }
  __syncthreads();
  if (tid < kPanel) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) s += s_part[i * kPanel + tid];
    y[blockIdx.x * kPanel + tid] = __float2half(s);
  }
}

}  // namespace

// y (N,) = the variant `part` on a PackedNM's flat element-wise fp16 values and 4-bit positions, and x (K,).
void anatomy(int64_t part, const torch::Tensor& values, const torch::Tensor& positions, const torch::Tensor& x,
             torch::Tensor y, int64_t m, int64_t kept) {
  const int64_t K = x.numel(), N = y.numel();
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf && values.scalar_type() == torch::kHalf, "fp16 on CUDA");
  TORCH_CHECK(K % m == 0 && K <= kMaxK && N % kPanel == 0 && m <= 16, "K <= 4096, N % 32 == 0, M <= 16");
  TORCH_CHECK(values.numel() == K / m * kept * N && positions.numel() == values.numel() / 2, "packed sizes");
  const auto* v = reinterpret_cast<const __half*>(values.data_ptr());
  const auto* xp = reinterpret_cast<const __half*>(x.data_ptr());
  auto* yp = reinterpret_cast<__half*>(y.data_ptr());
  const uint8_t* ip = positions.data_ptr<uint8_t>();
  const dim3 grid(static_cast<unsigned>(N / kPanel));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int k = static_cast<int>(K), mm = static_cast<int>(m), kp = static_cast<int>(kept);
  switch (part) {
    case kWhole: anatomy_kernel<kWhole><<<grid, kThreads, 0, stream>>>(v, ip, xp, yp, k, mm, kp); break;
    case kLocalX: anatomy_kernel<kLocalX><<<grid, kThreads, 0, stream>>>(v, ip, xp, yp, k, mm, kp); break;
    case kStagedXUnused: anatomy_kernel<kStagedXUnused><<<grid, kThreads, 0, stream>>>(v, ip, xp, yp, k, mm, kp); break;
    case kNoX: anatomy_kernel<kNoX><<<grid, kThreads, 0, stream>>>(v, ip, xp, yp, k, mm, kp); break;
    case kBytesOnly: anatomy_kernel<kBytesOnly><<<grid, kThreads, 0, stream>>>(v, ip, xp, yp, k, mm, kp); break;
    default: TORCH_CHECK(false, "unknown part ", part);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) { module.def("anatomy", &anatomy); }
