// What the element-wise N:M SpMV's time at one row of x is made of: the SpMV of kernels_ext/nm_gemm.cu reduced to
// its M = 1 core (one 32-column panel per CTA, 4-bit positions, 16 rows per lane in batches of 4), the same kernel
// with parts of its work left out, and trial designs of its parts (how x is staged, how positions are decoded, how
// many panels a CTA takes). Built and timed by bench/nm_spmv_anatomy.py; not part of the extension.
#include <cuda_fp16.h>
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <utility>

#include "nm_device.cuh"
#include "sm90_wgmma.cuh"

namespace {

using sparseprune::nm::Divisor;
using sparseprune::nm::GroupOffsets;
using sparseprune::nm::Positions;

constexpr int kThreads = 256, kWarps = 8, kLanesN = 4, kCols = 8, kPanel = 32, kRowSlots = 64, kUnroll = 4;
constexpr int kMaxK = 4096;

// Which work a variant keeps. kWhole: x staged in shared memory as fp32 and read once per kept value (the SpMV).
// kLocalX: shared memory filled by each thread instead of staged from global memory (no reads of x from L2).
// kStagedXUnused: x staged, each value multiplied by its position instead of its x. kNoX: neither staged nor read.
// kBytesOnly: values summed and positions XORed: the weight's bytes and little else.
enum Part { kWhole, kLocalX, kStagedXUnused, kNoX, kBytesOnly };

// A variant: the work it keeps, and the designs it takes. byte_perm: positions decoded by the SpMV's own GroupOffsets
// (nm_device.cuh), instead of a shift, mask, add and scale per column. cluster > 1: x reaches the cluster's CTAs by one bulk copy per CTA of a 1/cluster slice, multicast to
// all, instead of every CTA reading all of x from L2. panels: panels a CTA takes in turn, staging x once.
struct Variant {
  Part part;
  bool byte_perm;
  int cluster;
  int panels;
};
constexpr Variant kVariants[] = {
    {kWhole, true, 1, 1},       {kLocalX, true, 1, 1}, {kStagedXUnused, false, 1, 1}, {kNoX, false, 1, 1},
    {kBytesOnly, false, 1, 1},  {kWhole, false, 1, 1}, {kWhole, true, 2, 1},          {kWhole, true, 4, 1},
    {kWhole, true, 1, 2},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

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

// Barrier across the CTAs of a cluster (all threads of each take part).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Stages x (K fp16) as fp32 in s_x. Cluster > 1: each CTA copies its 1/Cluster slice of x into s_xh of every CTA
// of the cluster with one multicast bulk copy, then converts the whole. `bar` is this CTA's fresh mbarrier.
template <int Cluster>
__device__ __forceinline__ void stage_x(float* s_x, __half* s_xh, uint32_t bar, const __half* x, int K) {
  const int tid = threadIdx.x;
  if constexpr (Cluster > 1) {
#ifdef SPARSEPRUNE_WGMMA
    using namespace sparseprune::tw;
    cluster_sync();  // every CTA's barrier is initialised before a peer's copy completes on it
    if (tid == 0) {
      const uint32_t bytes = 2u * K, slice = bytes / Cluster, rank = cluster_rank();
      mbarrier_arrive_expect_tx(bar, bytes);
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
          "%4;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(s_xh)) + rank * slice),
          "l"(reinterpret_cast<const char*>(x) + rank * slice), "r"(slice), "r"(bar),
          "h"(static_cast<uint16_t>((1u << Cluster) - 1u))
          : "memory");
    }
    mbarrier_wait(bar, 0);
    cluster_arrive();  // matched by the wait before exit: no CTA leaves while its copies may still land in a peer
    x = s_xh;
#endif
  }
  for (int i = tid; i < K / 8; i += kThreads) {
    const uint4 q = Cluster > 1 ? reinterpret_cast<const uint4*>(x)[i] : __ldg(reinterpret_cast<const uint4*>(x) + i);
    const __half* h = reinterpret_cast<const __half*>(&q);
    float4* d = reinterpret_cast<float4*>(s_x + 8 * i);
    d[0] = make_float4(__half2float(h[0]), __half2float(h[1]), __half2float(h[2]), __half2float(h[3]));
    d[1] = make_float4(__half2float(h[4]), __half2float(h[5]), __half2float(h[6]), __half2float(h[7]));
  }
  __syncthreads();
}

template <int V>
__global__ void __launch_bounds__(kThreads, 3)
    anatomy_kernel(const __half* values, const uint8_t* positions, const __half* x, __half* y, int K, int m,
                   int kept) {
  constexpr Part P = kVariants[V].part;
  constexpr int kPanels = kVariants[V].panels, kCluster = kVariants[V].cluster;
  __shared__ __align__(16) float s_x[kMaxK];
  __shared__ __align__(128) __half s_xh[kCluster > 1 ? kMaxK : 8];
  __shared__ __align__(8) uint64_t s_bar;
  __shared__ float s_part[kPanels][kWarps * kPanel];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_n = lane % kLanesN, slot = warp * (32 / kLanesN) + lane / kLanesN;
  const int rows = K / m * kept;
  const int64_t panel0 = static_cast<int64_t>(blockIdx.x) * kPanels;
  const __half* panel_values = values + panel0 * rows * kPanel + lane_n * kCols;
  const uint8_t* panel_positions = positions + panel0 * rows * kPanel / 2 + lane_n * kCols / 2;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&s_bar));
#ifdef SPARSEPRUNE_WGMMA
  if (kCluster > 1 && tid == 0) {
    sparseprune::tw::mbarrier_init(bar, 1);
    sparseprune::tw::fence_mbarrier_init();
  }
#endif
  float acc[kPanels][kCols] = {};
  unsigned bits = 0;
  Batch b;
  load_batch(b, panel_values, panel_positions, slot, rows);
  if constexpr (P == kWhole || P == kStagedXUnused) {
    stage_x<kCluster>(s_x, s_xh, bar, x, K);
  } else if constexpr (P == kLocalX) {
    for (int i = tid; i < K; i += kThreads) s_x[i] = static_cast<float>(i & 7) - 3.5f;
    __syncthreads();
  }
  const Divisor by_kept(kept);
  const uint32_t mask4 = 4u * (m - 1) * 0x01010101u;
#pragma unroll
  for (int p = 0; p < kPanels; ++p) {
    for (int row = slot; row < rows; row += kRowSlots * kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = row + u * kRowSlots;
        if (r >= rows) break;
        const int base = by_kept(r) * m;
        const __half* w = reinterpret_cast<const __half*>(&b.values[u]);
        bits ^= b.positions[u];
        if constexpr (kVariants[V].byte_perm) {
          const GroupOffsets<Positions::kNibbles> at(make_uint2(b.positions[u], 0u), mask4);
          const char* group = reinterpret_cast<const char*>(s_x + base);
#pragma unroll
          for (int e = 0; e < kCols; ++e) {
            acc[p][e] += *reinterpret_cast<const float*>(group + at(e)) * __half2float(w[e]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < kCols; ++e) {
            const int pos = (b.positions[u] >> (4 * e)) & (m - 1);
            if constexpr (P == kWhole || P == kLocalX) {
              acc[p][e] += s_x[base + pos] * __half2float(w[e]);
            } else if constexpr (P == kBytesOnly) {
              acc[p][e] += __half2float(w[e]);
            } else {
              acc[p][e] += static_cast<float>(base + pos) * __half2float(w[e]);
            }
          }
        }
      }
      const int next = row + kRowSlots * kUnroll;
      if (next < rows) {
        load_batch(b, panel_values + p * rows * kPanel, panel_positions + p * rows * kPanel / 2, next, rows);
      } else if (p + 1 < kPanels) {
        load_batch(b, panel_values + (p + 1) * rows * kPanel, panel_positions + (p + 1) * rows * kPanel / 2, slot,
                   rows);
      }
    }
  }
  acc[0][0] += bits == 0x9e3779b9u ? 1.0f : 0.0f;  // keeps the position loads of kBytesOnly alive
#pragma unroll
  for (int p = 0; p < kPanels; ++p) {
#pragma unroll
    for (int e = 0; e < kCols; ++e) {
#pragma unroll
      for (int off = kLanesN; off < 32; off <<= 1) acc[p][e] += __shfl_xor_sync(0xffffffffu, acc[p][e], off);
    }
    if (lane < kLanesN) {
#pragma unroll
      for (int e = 0; e < kCols; ++e) s_part[p][warp * kPanel + lane * kCols + e] = acc[p][e];
    }
  }
  __syncthreads();
  if (tid < kPanel * kPanels) {
    const int p = tid / kPanel, c = tid % kPanel;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) s += s_part[p][i * kPanel + c];
    y[(panel0 + p) * kPanel + c] = __float2half(s);
  }
  if constexpr (kCluster > 1 && (P == kWhole || P == kStagedXUnused)) cluster_wait();
}

template <int V>
void launch(const __half* v, const uint8_t* ip, const __half* xp, __half* yp, int64_t N, int k, int m, int kept,
            cudaStream_t stream) {
  constexpr int kCluster = kVariants[V].cluster;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(N / kPanel / kVariants[V].panels));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = kCluster > 1 ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, anatomy_kernel<V>, v, ip, xp, yp, k, m, kept));
}

template <int... V>
void launch_variant(int64_t variant, std::integer_sequence<int, V...>, const __half* v, const uint8_t* ip,
                    const __half* xp, __half* yp, int64_t N, int k, int m, int kept, cudaStream_t stream) {
  ((variant == V ? launch<V>(v, ip, xp, yp, N, k, m, kept, stream) : void()), ...);
}

}  // namespace

// y (N,) = variant `variant` of kVariants on a PackedNM's flat element-wise fp16 values and 4-bit positions, and
// x (K,).
void anatomy(int64_t variant, const torch::Tensor& values, const torch::Tensor& positions, const torch::Tensor& x,
             torch::Tensor y, int64_t m, int64_t kept) {
  const int64_t K = x.numel(), N = y.numel();
  TORCH_CHECK(variant >= 0 && variant < kVariantCount, "unknown variant ", variant);
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kHalf && values.scalar_type() == torch::kHalf, "fp16 on CUDA");
  TORCH_CHECK(K % m == 0 && K <= kMaxK && K % 64 == 0 && m <= 16, "K <= 4096, K % 64 == 0, M <= 16");
  TORCH_CHECK(N % (4 * kPanel) == 0, "N % 128 == 0: whole clusters and panel pairs");
  TORCH_CHECK(values.numel() == K / m * kept * N && positions.numel() == values.numel() / 2, "packed sizes");
  launch_variant(variant, std::make_integer_sequence<int, kVariantCount>(),
                 reinterpret_cast<const __half*>(values.data_ptr()), positions.data_ptr<uint8_t>(),
                 reinterpret_cast<const __half*>(x.data_ptr()), reinterpret_cast<__half*>(y.data_ptr()), N,
                 static_cast<int>(K), static_cast<int>(m), static_cast<int>(kept), c10::cuda::getCurrentCUDAStream());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) { module.def("anatomy", &anatomy); }
