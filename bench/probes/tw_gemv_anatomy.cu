// What the TW GEMV's time at one row of x is made of: the whole-x GEMV of kernels_ext/tw_gemv.cu reduced to its
// core (a CTA per 32-column slice of a tile over the tile's kept rows, x staged whole as fp32, each row's index
// loaded beside its values, 16 row loads in flight per lane), the same core with parts of its work left out, and the
// same bytes read in another split (a CTA per quarter of a tile's kept rows over all its columns, so each CTA reads
// whole 256-byte rows of one contiguous block). No epilogue: no column list, bias or pruned columns. Built and timed
// by bench/tw_gemv_anatomy.py; not part of the extension.
#include <cuda_fp16.h>
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "tw_device.cuh"

namespace {

using sparseprune::tw::cluster_sync;
using sparseprune::tw::store_to_cluster_cta;

constexpr int kThreads = 256, kUnroll = 16, kG = 128, kMaxK = 8192;

// Which work a variant keeps. kCore: the GEMV's M = 1 core. kNoX: row indices loaded, x neither staged nor read
// (each value multiplied by its index's low bits). kBytesOnly: the values summed, nothing else.
enum Part { kCore, kNoX, kBytesOnly };

// A variant: the work it keeps, and how the tile is split between CTAs (slices: 4 CTAs of 32 columns over all
// kept rows, as the GEMV; quarters: 4 CTAs of all 128 columns over a quarter of the kept rows each). cluster: the
// quarters' CTAs form a cluster, and each CTA adds one slice's four partial sums, pushed into its shared memory by
// the others, so the output is the slices' (tile * 128 + column).
struct Variant {
  Part part;
  bool quarters, cluster;
};
constexpr Variant kVariants[] = {{kCore, false, false}, {kNoX, false, false},      {kBytesOnly, false, false},
                                 {kCore, true, false},  {kBytesOnly, true, false}, {kCore, true, true}};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

struct Args {
  const __half* values;
  const int* rows;
  const int* tile_ptr;
  const __half* x;
  float* y;  // slices: [tile * 128 + column]; quarters: [(tile * 4 + quarter) * 128 + column]
  int K;
};

// Lane geometry of a split: LanesN lanes of 8 columns cover a row's share, kThreads / LanesN rows at once.
template <bool Quarters>
struct Split {
  static constexpr int kLanesN = Quarters ? 16 : 4, kRowSlots = kThreads / kLanesN, kCols = kLanesN * 8;
};

template <Part P, bool Quarters, bool Cluster>
__global__ void __launch_bounds__(kThreads) anatomy_kernel(Args a) {
  using S = Split<Quarters>;
  __shared__ __align__(16) float s_x[kMaxK + 8];
  __shared__ float s_slice[4][32];  // Cluster: the four quarters' sums of this CTA's slice
  const int tile = blockIdx.x / 4, part = blockIdx.x % 4, tid = threadIdx.x;
  const int p0 = a.tile_ptr[tile], kt = a.tile_ptr[tile + 1] - p0;
  const int quarter = (kt / 4 + 15) / 16 * 16;
  const int kb = Quarters ? min(kt, part * quarter) : 0, ke = Quarters ? min(kt, kb + quarter) : kt;
  const int lane_n = tid % S::kLanesN, slot = tid / S::kLanesN;
  const __half* vals = a.values + static_cast<int64_t>(p0) * kG + (Quarters ? 0 : part * 32) + lane_n * 8;
  const int* rows = a.rows + p0;
  uint4 v[kUnroll];
  int x_row[kUnroll];
  auto load_batch = [&](int k) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int r = k + u * S::kRowSlots;
      if (r < ke) {
        v[u] = __ldg(reinterpret_cast<const uint4*>(vals + static_cast<int64_t>(r) * kG));
        if constexpr (P != kBytesOnly) x_row[u] = __ldg(rows + r);
      }
    }
  };
  int k = kb + slot;
  load_batch(k);
  if constexpr (P == kCore) {
    for (int k8 = tid * 8; k8 < a.K; k8 += kThreads * 8) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(a.x + k8));
      const __half* h = reinterpret_cast<const __half*>(&q);
#pragma unroll
      for (int e = 0; e < 8; ++e) s_x[k8 + e] = __half2float(h[e]);
    }
    if (tid == 0) s_x[a.K] = 0.0f;  // padding rows (index -1) read this zero
    __syncthreads();
  }
  float acc[8] = {};
  for (; k < ke; k += S::kRowSlots * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k + u * S::kRowSlots >= ke) break;
      float xv = 1.0f;
      if constexpr (P == kCore) xv = s_x[x_row[u] < 0 ? a.K : x_row[u]];
      if constexpr (P == kNoX) xv = static_cast<float>(x_row[u] & 3);
      const __half* h = reinterpret_cast<const __half*>(&v[u]);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += xv * __half2float(h[e]);
    }
    if (k + S::kRowSlots * kUnroll < ke) load_batch(k + S::kRowSlots * kUnroll);
  }
  // Sums of the lanes with the same lane_n: within the warp by shuffles, then across warps through shared memory.
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
#pragma unroll
    for (int off = S::kLanesN; off < 32; off <<= 1) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
  }
  __syncthreads();  // the staging is reused for the warps' sums, [warp][column]
  if (lane < S::kLanesN) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_x[warp * S::kCols + lane * 8 + e] = acc[e];
  }
  __syncthreads();
  if (tid < S::kCols) {
    float s = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) s += s_x[i * S::kCols + tid];
    if constexpr (Cluster) {
      store_to_cluster_cta(&s_slice[part][tid % 32], tid / 32, s);  // column tid: the slice of CTA tid / 32
    } else {
      const int64_t out = Quarters ? static_cast<int64_t>(blockIdx.x) * kG + tid : tile * kG + part * 32 + tid;
      a.y[out] = s;
    }
  }
  if constexpr (Cluster) {
    cluster_sync();  // every quarter's sums have landed
    if (tid < 32) {
      a.y[tile * kG + part * 32 + tid] = s_slice[0][tid] + s_slice[1][tid] + s_slice[2][tid] + s_slice[3][tid];
    }
  }
}

template <int I>
void launch_variant(int variant, int ctas, const Args& a, cudaStream_t stream) {
  if constexpr (I < kVariantCount) {
    if (variant != I) return launch_variant<I + 1>(variant, ctas, a, stream);
    constexpr Variant v = kVariants[I];
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = v.cluster ? 4 : 1;
    cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, anatomy_kernel<v.part, v.quarters, v.cluster>, a));
  }
}

void anatomy(int64_t variant, const torch::Tensor& values, const torch::Tensor& rows, const torch::Tensor& tile_ptr,
             const torch::Tensor& x, torch::Tensor& y) {
  TORCH_CHECK(variant >= 0 && variant < kVariantCount, "unknown variant");
  TORCH_CHECK(values.scalar_type() == torch::kHalf && values.size(1) == kG, "fp16 values of G = 128");
  TORCH_CHECK(x.scalar_type() == torch::kHalf && x.is_contiguous() && x.numel() % 8 == 0 && x.numel() <= kMaxK,
              "x: K fp16, K a multiple of 8 up to 8192");
  const int tiles = static_cast<int>(tile_ptr.numel() - 1);
  TORCH_CHECK(y.scalar_type() == torch::kFloat && y.numel() >= int64_t{tiles} * 4 * kG, "y: fp32, 4 x 128 per tile");
  const Args a{static_cast<const __half*>(values.data_ptr()), rows.data_ptr<int>(), tile_ptr.data_ptr<int>(),
               static_cast<const __half*>(x.data_ptr()), y.data_ptr<float>(), static_cast<int>(x.numel())};
  launch_variant<0>(static_cast<int>(variant), tiles * 4, a, c10::cuda::getCurrentCUDAStream());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("anatomy", &anatomy); }
