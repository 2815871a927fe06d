// Residual add + LayerNorm on a feature-major (H, T) activation in one pass over memory. Torch, and torch.compile,
// reduce over dim 0 of that layout in two passes (statistics, then the normalization re-reading x and the residual);
// on an H200 that took BERT-base's 24 norms at 16 x 256 tokens 448 us (bench/results/e2e_h200_bert.md), about three
// times what reading and writing the bytes once costs.
//
// A CTA owns a tile of kTokens tokens (columns) and a slice of the features; the slices of one tile form a thread
// block cluster that adds its per-token partial sums through distributed shared memory. Splitting H is what fills
// the GPU: a whole-H CTA per 32 tokens gave 4096 tokens 128 CTAs of 48 rows a thread (12% achieved occupancy,
// 615 GB/s, 20.5 us at H = 768 on an H200) and one 256-token sequence 32. Each lane reads 16 bytes (8 tokens) of a
// feature row, kLanes lanes side by side, and keeps its kRows rows in registers between the passes; kRows is a
// template parameter so that every load is issued before the first is used.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "layer_norm.h"

namespace sparseprune {
namespace norm {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;     // the portable cluster size
constexpr int64_t kMinCtas = 256;  // two per SM of an H100/H200 (four, with three rows a thread, ran 15% slower)

template <typename T> struct Scalar;
template <> struct Scalar<__half> {
  static __device__ float to_float(__half v) { return __half2float(v); }
  static __device__ __half from_float(float v) { return __float2half_rn(v); }
};
template <> struct Scalar<__nv_bfloat16> {
  static __device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

// kVector consecutive tokens of a feature row: one 16-byte access when kVector is 8 (T a multiple of 8, rows
// aligned), else a single element.
template <typename T, int kVector>
__device__ __forceinline__ void load_tokens(const T* at, T (&dst)[kVector]) {
  if constexpr (kVector == 8) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(at);
  } else {
    dst[0] = *at;
  }
}

template <typename T, int kVector>
__device__ __forceinline__ void store_tokens(T* at, const T (&src)[kVector]) {
  if constexpr (kVector == 8) {
    *reinterpret_cast<uint4*>(at) = *reinterpret_cast<const uint4*>(src);
  } else {
    *at = src[0];
  }
}

// The cluster's sum of the CTAs' per-token partials, in rank order, so that every CTA of the cluster gets the same
// bits. A cluster of one reads its own shared memory.
__device__ __forceinline__ float cluster_sum(float* partial, int clusters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clusters > 1) {
    const cg::cluster_group cluster = cg::this_cluster();
    float total = 0.0f;
    for (int rank = 0; rank < clusters; ++rank) total += *cluster.map_shared_rank(partial, rank);
    return total;
  }
#else
  if (clusters > 1) __trap();  // the host asks for clusters only on sm_90 and later
#endif
  return *partial;
}

__device__ __forceinline__ void cluster_sync(int clusters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clusters > 1) {
    cg::this_cluster().sync();
    return;
  }
#endif
  __syncthreads();
}

// Per-token sums over the CTA's threads (shuffles across the rows of a warp, then shared memory across warps) and
// then over the cluster; on return stat[t] is f(that sum) for every token t of the tile.
template <int kVector, int kLanes, typename F>
__device__ __forceinline__ void token_statistic(float (&acc)[kVector], float (*warp_partial)[kVector * kLanes],
                                                float* cta_partial, float* stat, int clusters, F f) {
  constexpr int kTokens = kVector * kLanes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = kLanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int v = 0; v < kVector; ++v) acc[v] += __shfl_xor_sync(0xffffffffu, acc[v], offset);
  }
  if (lane < kLanes) {
#pragma unroll
    for (int v = 0; v < kVector; ++v) warp_partial[warp][lane * kVector + v] = acc[v];
  }
  __syncthreads();
  if (threadIdx.x < kTokens) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += warp_partial[w][threadIdx.x];
    cta_partial[threadIdx.x] = sum;
  }
  cluster_sync(clusters);  // every CTA's partial is written
  if (threadIdx.x < kTokens) stat[threadIdx.x] = f(cluster_sum(cta_partial + threadIdx.x, clusters));
  __syncthreads();
}

// Rank `blockIdx.x % clusters` of tile `blockIdx.x / clusters` normalizes features [rank * slice, rank * slice +
// slice) of tokens [tile * kTokens, tile * kTokens + kTokens); thread (warp w, lane l) holds rows
// w * (32 / kLanes) + l / kLanes + i * kRowStep of the slice and tokens (l % kLanes) * kVector + [0, kVector).
template <typename T, int kVector, int kLanes, int kRows>
__global__ void __launch_bounds__(kThreads) add_layer_norm_kernel(Problem p, int clusters, int slice) {
  using S = Scalar<T>;
  constexpr int kTokens = kVector * kLanes, kRowStep = kWarps * 32 / kLanes;
  __shared__ float warp_partial[kWarps][kTokens];
  __shared__ float cta_partial[2][kTokens];
  __shared__ float mean[kTokens], rstd[kTokens];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rank = static_cast<int>(blockIdx.x % clusters);
  const int64_t tile = blockIdx.x / clusters;
  const int64_t t = tile * kTokens + (lane % kLanes) * kVector;
  const bool token_ok = t < p.T;
  const int64_t t_read = token_ok ? t : p.T - kVector;  // a chunk past T reads the last one and stores nothing
  const int slice_end = min(static_cast<int>(p.H), (rank + 1) * slice);
  const int first_row = rank * slice + warp * (32 / kLanes) + lane / kLanes;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);

  alignas(sizeof(T) * kVector) T xs[kRows][kVector];
  alignas(sizeof(T) * kVector) T rs[kRows][kVector];
  T gs[kRows], bs[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = first_row + i * kRowStep;
    const int64_t offset = static_cast<int64_t>(row < slice_end ? row : 0) * p.T + t_read;
    load_tokens<T, kVector>(x + offset, xs[i]);
    load_tokens<T, kVector>(res + offset, rs[i]);
    gs[i] = weight[row < slice_end ? row : 0];
    bs[i] = bias[row < slice_end ? row : 0];
  }
  // The sum, rounded to T as torch's `x + residual` is, replaces x.
  T (&sums)[kRows][kVector] = xs;
  float acc[kVector];
#pragma unroll
  for (int v = 0; v < kVector; ++v) acc[v] = 0.0f;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const bool row_ok = first_row + i * kRowStep < slice_end;
#pragma unroll
    for (int v = 0; v < kVector; ++v) {
      sums[i][v] = S::from_float(S::to_float(xs[i][v]) + S::to_float(rs[i][v]));
      if (row_ok) acc[v] += S::to_float(sums[i][v]);
    }
  }
  const float inv_h = 1.0f / static_cast<float>(p.H);
  token_statistic<kVector, kLanes>(acc, warp_partial, cta_partial[0], mean, clusters,
                                   [inv_h](float sum) { return sum * inv_h; });
  const int my_token = (lane % kLanes) * kVector;
#pragma unroll
  for (int v = 0; v < kVector; ++v) acc[v] = 0.0f;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const bool row_ok = first_row + i * kRowStep < slice_end;
#pragma unroll
    for (int v = 0; v < kVector; ++v) {
      const float d = S::to_float(sums[i][v]) - mean[my_token + v];
      if (row_ok) acc[v] += d * d;
    }
  }
  const float eps = p.eps;
  token_statistic<kVector, kLanes>(acc, warp_partial, cta_partial[1], rstd, clusters,
                                   [inv_h, eps](float sum) { return rsqrtf(sum * inv_h + eps); });
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Done reading the other CTAs' partials: arrive now, wait before exiting (so no CTA's shared memory goes while
  // another reads it), and let the stores run in between.
  if (clusters > 1) cg::this_cluster().barrier_arrive();
#endif
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = first_row + i * kRowStep;
    const float g = S::to_float(gs[i]), b = S::to_float(bs[i]);
    alignas(sizeof(T) * kVector) T y[kVector];
#pragma unroll
    for (int v = 0; v < kVector; ++v) {
      y[v] = S::from_float((S::to_float(sums[i][v]) - mean[my_token + v]) * rstd[my_token + v] * g + b);
    }
    if (row < slice_end && token_ok) store_tokens<T, kVector>(out + static_cast<int64_t>(row) * p.T + t, y);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clusters > 1) cg::this_cluster().barrier_wait();
#endif
}

// How one problem is cut: kLanes lanes of kVector tokens per feature row, `clusters` CTAs per token tile.
struct Tiling {
  int vector, lanes, clusters, slice, rows;
  int64_t ctas;
};

// The thread holds kRows rows for these counts only; a count in between rounds up (its extra rows are masked).
constexpr int kRowCounts[] = {1, 2, 3, 4, 6, 8};

int rounded_rows(int rows) {
  for (int r : kRowCounts) {
    if (rows <= r) return r;
  }
  return 0;
}

// The widest token tile (fewest weight reads, longest contiguous runs), then the smallest cluster, that gives at
// least kMinCtas CTAs with at most 8 rows a thread; when none does, the tiling with the most CTAs.
Tiling choose_tiling(int64_t H, int64_t T, bool vectors, int max_cluster) {
  const int vector = vectors ? 8 : 1;
  // Scalar tiles of one token always fit (a thread then holds at most H / 256 rows), clusters or not.
  const int lane_options_vector[] = {4, 2, 1}, lane_options_scalar[] = {8, 1};
  const int* lanes_begin = vectors ? lane_options_vector : lane_options_scalar;
  const int lane_count = vectors ? 3 : 2;
  Tiling best{};
  for (int li = 0; li < lane_count; ++li) {
    const int lanes = lanes_begin[li];
    const int64_t tiles = (T + vector * lanes - 1) / (vector * lanes);
    const int row_step = kWarps * 32 / lanes;
    for (int clusters = 1; clusters <= max_cluster; clusters *= 2) {
      const int slice = static_cast<int>((H + clusters - 1) / clusters);
      const int rows = rounded_rows((slice + row_step - 1) / row_step);
      if (rows == 0) continue;
      const Tiling tiling{vector, lanes, clusters, slice, rows, tiles * clusters};
      if (tiling.ctas >= kMinCtas) return tiling;
      if (tiling.ctas > best.ctas) best = tiling;
    }
  }
  return best;
}

template <typename T, int kVector, int kLanes, int kRows>
cudaError_t launch_tiled(const Problem& p, const Tiling& tiling) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(tiling.ctas));
  config.blockDim = dim3(kThreads);
  config.stream = p.stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(tiling.clusters);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = tiling.clusters > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&config, add_layer_norm_kernel<T, kVector, kLanes, kRows>, p, tiling.clusters,
                            tiling.slice);
}

template <typename T, int kVector, int kLanes>
cudaError_t launch_rows(const Problem& p, const Tiling& tiling) {
  switch (tiling.rows) {
    case 1: return launch_tiled<T, kVector, kLanes, 1>(p, tiling);
    case 2: return launch_tiled<T, kVector, kLanes, 2>(p, tiling);
    case 3: return launch_tiled<T, kVector, kLanes, 3>(p, tiling);
    case 4: return launch_tiled<T, kVector, kLanes, 4>(p, tiling);
    case 6: return launch_tiled<T, kVector, kLanes, 6>(p, tiling);
    default: return launch_tiled<T, kVector, kLanes, 8>(p, tiling);
  }
}

template <typename T>
cudaError_t launch_typed(const Problem& p, const Tiling& tiling) {
  if (tiling.vector == 1) return tiling.lanes == 8 ? launch_rows<T, 1, 8>(p, tiling) : launch_rows<T, 1, 1>(p, tiling);
  switch (tiling.lanes) {
    case 4: return launch_rows<T, 8, 4>(p, tiling);
    case 2: return launch_rows<T, 8, 2>(p, tiling);
    default: return launch_rows<T, 8, 1>(p, tiling);
  }
}

// Clusters need sm_90; the answer is cached per device.
int max_cluster_on_current_device() {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return 1;
  if (cached[device] == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cached[device] = major >= 9 ? kMaxCluster : 1;
  }
  return cached[device];
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

const char* launch_add_layer_norm(const Problem& p) {
  if (!supports(p.H)) return "H must be a positive multiple of 64 up to 1024";
  if (p.T == 0) return nullptr;
  const bool vectors = p.T % 8 == 0 && aligned16(p.x) && aligned16(p.residual) && aligned16(p.out);
  const Tiling tiling = choose_tiling(p.H, p.T, vectors, max_cluster_on_current_device());
  if (tiling.ctas == 0) return "no tiling of this H fits the kernel";
  const cudaError_t launched =
      p.dtype == DType::kHalf ? launch_typed<__half>(p, tiling) : launch_typed<__nv_bfloat16>(p, tiling);
  const cudaError_t err = launched != cudaSuccess ? launched : cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace norm
}  // namespace sparseprune
