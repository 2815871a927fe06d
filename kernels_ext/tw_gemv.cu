// The TW GEMM at small M (M <= kSmallM), bound by the packed weight's bytes. A CTA owns a slice of kGemvSliceCols
// columns of one tile over the tile's kept K (or one K split of it), so every packed value is read once, and finishes
// its columns and a share of the pruned ones itself: unless K is split (too few CTAs for the GPU), one launch is the
// whole call. Up to kGemvMaxM rows of x the multiplies run on CUDA cores; above, where those FMAs would set the time,
// on tensor cores (mma.sync m16n8k16, x feature-major with 16-byte rows).
#include <algorithm>
#include <optional>
#include <type_traits>

#include "mma_sync.cuh"
#include "tw_device.cuh"

namespace sparseprune {
namespace tw {
namespace {

constexpr int kGemvSliceCols = 32;
// Mean kept rows per tile from which the M = 1 whole-x GEMV splits each tile's rows between its slices' CTAs
// (tw_gemv_whole_x_kernel with RowShares > 1) instead of its columns. Measured on an H200 on 4096 x 11008
// (bench/results/tw_h200_gemv_row_shares.md, every whole-x case taking row shares): 4.1% faster at a mean of 2905
// kept rows (50% sparsity) with G = 128 and 1.7% with G = 64, within -1% to +1.2% at 2063 (75%), 0.8-1.6% slower
// at 1312 (90%).
constexpr int kRowShareMinMeanK = 2560;
constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
// Floats of the warps' partial sums of a slice, [warp][MaxM][slice column].
template <int MaxM>
constexpr int kSlicePartialFloats = kGemvWarps * MaxM * kGemvSliceCols;

// The tile pointers as a kernel parameter, taken from the host copy where the call has one (`auto`) and the tiles
// are few enough: every GEMV's CTAs then find their tile's rows in the parameter space instead of waiting for
// tile_ptr from global memory before their first value load (a dependent load from HBM where the weight is cold, as
// it is for each layer of a decoding model): 2-4% faster at one row on 4096 x 11008 at 50-90% sparsity
// (bench/results/tw_h200_gemv_tile_bounds.md), 0-2% at 2-16 rows (bench/results/tw_h200_gemv_ring.md). count 0:
// read tile_ptr.
constexpr int kParamTiles = 512;
struct TileBounds {
  int32_t count;
  int32_t ptr[kParamTiles + 1];
};
static_assert(sizeof(PackedTile) + sizeof(Problem) + sizeof(int) + sizeof(TileBounds) <= 4096,
              "the GEMVs' parameters fit the 4 KB every launch path allows");

// A GEMV CTA's work, from its block index: slice `slice` of tile `tile`, whose kept rows start at p0 in w.rows and
// w.values, over the kept rows [kb, ke) of the tile (its K split, blockIdx.y). The tile's bounds come from `bounds`
// where it holds them (count > 0), else from tile_ptr.
struct SliceWork {
  int tile, slice, p0, kb, ke;
  __device__ __forceinline__ SliceWork(const PackedTile& w, int k_split, const TileBounds& bounds) {
    const int slices = w.granularity / kGemvSliceCols;
    tile = blockIdx.x / slices;
    slice = blockIdx.x % slices;
    const bool in_params = bounds.count > 0;
    p0 = in_params ? bounds.ptr[tile] : w.tile_ptr[tile];
    const int kt = (in_params ? bounds.ptr[tile + 1] : w.tile_ptr[tile + 1]) - p0;
    kb = min(kt, static_cast<int>(blockIdx.y) * k_split);
    ke = min(kt, kb + k_split);
  }
};

// The M x kGemvSliceCols outputs of a CTA's slice, kOutputs per thread (output t is row t / kGemvSliceCols, slice
// column t % kGemvSliceCols), finished from the warps' partial sums, staged in shared memory as [warp][MaxM][slice
// column]. The column indices are requested when the kernel starts and the biases right after its main loop: left to
// the end, each output waited for a column index and then for its bias, one dependent load after another behind all
// of the CTA's work. (Outputs ordered m fastest for a feature-major y, and the sums read through ld.shared, made the
// CUDA-core GEMV 1-3% slower at M = 1, and 18% on vector-wise 2:8.)
template <typename T, int MaxM>
class SliceOutputs {
 public:
  static constexpr int kOutputs = (MaxM * kGemvSliceCols + kGemvThreads - 1) / kGemvThreads;

  __device__ __forceinline__ SliceOutputs(const PackedTile& w, const Problem& p, const SliceWork& work)
      : split_(gridDim.y > 1), pos0_(work.tile * w.granularity + work.slice * kGemvSliceCols) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
      const int t = threadIdx.x + o * kGemvThreads;
      col_[o] = t < p.M * kGemvSliceCols ? w.cols[pos0_ + t % kGemvSliceCols] : -1;
    }
  }
  __device__ __forceinline__ void fetch_biases(const Problem& p) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) bias_[o] = col_[o] >= 0 ? column_bias<T>(p, col_[o]) : 0.0f;
  }
  // Adds up the Parts partial sums of this thread's outputs (the warps', or a cluster's shares) and finishes them
  // (bias, residual, activation), or after a K split adds them to the workspace for the finalize pass.
  template <int Parts = kGemvWarps>
  __device__ __forceinline__ void finish(const float* partial, const PackedTile& w, const Problem& p) const {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
      if (col_[o] < 0) continue;  // past M * kGemvSliceCols, or padding of the last tile
      const int t = threadIdx.x + o * kGemvThreads, m = t / kGemvSliceCols, c = t % kGemvSliceCols;
      float s[1] = {0.0f};
#pragma unroll
      for (int i = 0; i < Parts; ++i) s[0] += partial[(i * MaxM + m) * kGemvSliceCols + c];
      if (split_) {
        atomicAdd(p.workspace + ws_index(w, p, m, pos0_ + c), s[0]);
      } else {
        finish_output<T>(s, col_[o], bias_[o], m, w, p);
      }
    }
  }

 private:
  bool split_;
  int pos0_;  // the slice's first position in w.cols
  int col_[kOutputs];
  float bias_[kOutputs];
};

// The CTA's share of the pruned columns, written after its own outputs; none after a K split, whose finalize pass
// writes every column. The CTAs of every slice and row block (blockIdx.z) share them.
template <typename T>
__device__ __forceinline__ FinalizeCursor<T> pruned_share(const PackedTile& w, const Problem& p) {
  const int64_t ctas = static_cast<int64_t>(gridDim.x) * gridDim.z;
  const int64_t cta = static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x;
  return FinalizeCursor<T>(w, p, false, cta * kGemvThreads + threadIdx.x, gridDim.y > 1 ? 0 : ctas * kGemvThreads);
}

// CUDA cores (M <= kGemvMaxM, or an x without 16-byte rows). Each lane streams value vectors
// of Cols columns (16 bytes; 8 bytes for M > 4, so the MaxM x Cols accumulators fit beside more loads in flight)
// from rows kRowSlots apart, so a warp reads whole 64-byte row segments. The tile's kept rows of x are gathered
// into shared memory as fp32, [row][MaxM], one chunk at a time: the inner loop then reads x with one broadcast
// shared load per row instead of a dependent global load per row and m. Each thread gathers a few whole rows per
// chunk with all their loads in flight at once, from row indices it loaded a chunk ahead, and the chunk's first
// value loads are issued before the gather: a gather that walked the chunk element by element, each load waiting
// for its row index, set the kernel's length. The column indices and biases of the CTA's tail are requested before
// and right after the main loop (at M = 1 and 90% sparsity, 8% of the call).
constexpr int kGemvStageFloats = 8192;  // 32 KB of gathered x per chunk

// x(m, row) for m < MaxM as fp32: zeros past M and for a padding row (-1). A feature-major x whose rows are
// 16-byte aligned (x_vec) is read as whole 16-byte runs; MaxM is then the power of two above M and the row stride
// a multiple of 8 no smaller than M, so the run stays inside the row.
template <typename T, int MaxM>
__device__ __forceinline__ void gather_x_row(const T* x, const Problem& p, int row, int M, bool x_vec,
                                             float (&out)[MaxM]) {
  if (row < 0) {
#pragma unroll
    for (int m = 0; m < MaxM; ++m) out[m] = 0.0f;
    return;
  }
  const T* src = x + static_cast<int64_t>(row) * p.sxk;
  if constexpr (MaxM % 8 == 0) {
    if (x_vec) {
#pragma unroll
      for (int c = 0; c < MaxM; c += 8) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(src + c));
        const T* h = reinterpret_cast<const T*>(&q);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[c + e] = c + e < M ? to_float(h[e]) : 0.0f;
      }
      return;
    }
  }
#pragma unroll
  for (int m = 0; m < MaxM; ++m) out[m] = m < M ? to_float(src[m * p.sxm]) : 0.0f;
}

template <int MaxM>
struct GemvShape {
  static constexpr int kCols = MaxM <= 4 ? 8 : 4;
  static constexpr int kLanesN = kGemvSliceCols / kCols;
  static constexpr int kRowSlots = kGemvThreads / kLanesN;  // rows a CTA reads at once
  static constexpr int kUnroll = MaxM <= 2 ? 16 : 8;         // row loads in flight per lane
  static constexpr int kGatherRows = std::min(8, kGemvStageFloats / MaxM / kGemvThreads);  // per thread and chunk
  static constexpr int kChunkRows = kGatherRows * kGemvThreads;
  using Vec = std::conditional_t<kCols == 8, uint4, uint2>;
  static_assert(kSlicePartialFloats<MaxM> <= kGemvStageFloats, "the partial sums reuse the staging");
};

// A CUDA-core GEMV thread's place in its CTA's slice: the first of the values rows it reads (slot, slot +
// kRowSlots, ...) and the first packed value of its kCols columns.
template <typename T, int MaxM>
struct CudaCoreLane {
  int slot;
  const T* values;
  __device__ __forceinline__ CudaCoreLane(const PackedTile& w, const SliceWork& work)
      : slot(threadIdx.x / GemvShape<MaxM>::kLanesN) {
    const int lane_n = threadIdx.x % GemvShape<MaxM>::kLanesN;  // kLanesN divides the warp
    const int c0 = work.slice * kGemvSliceCols + lane_n * GemvShape<MaxM>::kCols;  // the first column in the tile
    values = static_cast<const T*>(w.values) + static_cast<int64_t>(work.p0) * w.granularity + c0;
  }
};

// The end of a CUDA-core GEMV CTA: its lanes' sums of the slice folded (the lanes with the same lane_n hold sums for
// the same columns: the warp's row lanes first, then the warps, through the staging), its outputs finished and its
// share of the pruned columns written.
template <typename T, int MaxM>
__device__ __forceinline__ void finish_cuda_core_slice(float (&acc)[MaxM][GemvShape<MaxM>::kCols], float* s_x,
                                                       SliceOutputs<T, MaxM>& outputs, FinalizeCursor<T>& fill,
                                                       const PackedTile& w, const Problem& p) {
  constexpr int kCols = GemvShape<MaxM>::kCols, kLanesN = GemvShape<MaxM>::kLanesN;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  outputs.fetch_biases(p);
  fill.fetch_bias(p);
#pragma unroll
  for (int m = 0; m < MaxM; ++m)
#pragma unroll
    for (int e = 0; e < kCols; ++e) {
      float s = acc[m][e];
#pragma unroll
      for (int off = kLanesN; off < 32; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      acc[m][e] = s;
    }
  __syncthreads();  // the staging is reused for the partial sums, [warp][m][slice column]
  if (lane < kLanesN) {
#pragma unroll
    for (int m = 0; m < MaxM; ++m)
#pragma unroll
      for (int e = 0; e < kCols; ++e) s_x[(warp * MaxM + m) * kGemvSliceCols + lane * kCols + e] = acc[m][e];
  }
  __syncthreads();
  outputs.finish(s_x, w, p);
  while (!fill.done()) fill.step(w, p);
}

// Multiplies one row of packed values (a lane's kCols columns) by x's rows at xs ([MaxM] fp32 in shared memory).
template <typename T, int MaxM, typename Vec>
__device__ __forceinline__ void multiply_row(float (&acc)[MaxM][GemvShape<MaxM>::kCols], const Vec& v,
                                             const float* xs) {
  float xv[MaxM];
  if constexpr (MaxM % 4 == 0) {
#pragma unroll
    for (int m = 0; m < MaxM; m += 4) {
      const float4 q = ld_shared_f4(xs + m);
      xv[m] = q.x, xv[m + 1] = q.y, xv[m + 2] = q.z, xv[m + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int m = 0; m < MaxM; ++m) xv[m] = ld_shared_f32(xs + m);
  }
  const T* wv = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int e = 0; e < GemvShape<MaxM>::kCols; ++e) {
    const float we = to_float(wv[e]);
#pragma unroll
    for (int m = 0; m < MaxM; ++m) acc[m][e] += xv[m] * we;
  }
}

template <typename T, int MaxM>
__global__ void __launch_bounds__(kGemvThreads)
    tw_gemv_kernel(PackedTile w, Problem p, int k_split, const __grid_constant__ TileBounds bounds) {
  using Shape = GemvShape<MaxM>;
  using Vec = typename Shape::Vec;
  allow_dependent_launch();  // a finalize pass may follow
  constexpr int kCols = Shape::kCols, kRowSlots = Shape::kRowSlots;
  constexpr int kUnroll = Shape::kUnroll;
  __shared__ __align__(16) float s_x[kGemvStageFloats];
  const SliceWork work(w, k_split, bounds);
  const int p0 = work.p0, kb = work.kb, ke = work.ke;
  const int tid = threadIdx.x;
  const CudaCoreLane<T, MaxM> me(w, work);
  const int slot = me.slot;
  const T* vals = me.values;
  const T* x = static_cast<const T*>(p.x);
  const int M = static_cast<int>(p.M);
  float acc[MaxM][kCols] = {};

  Vec v[kUnroll];
  auto load_batch = [&](int k, int k_end) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = k + u * kRowSlots;
      if (row < k_end) v[u] = __ldg(reinterpret_cast<const Vec*>(vals + static_cast<int64_t>(row) * w.granularity));
    }
  };
  int gather_rows[Shape::kGatherRows];  // kept-row indices of the thread's rows in the next chunk (-1: none)
  auto load_gather_rows = [&](int k0) {
#pragma unroll
    for (int j = 0; j < Shape::kGatherRows; ++j) {
      const int r = k0 + j * kGemvThreads + tid;
      gather_rows[j] = r < ke ? w.rows[p0 + r] : -1;
    }
  };
  const bool x_vec = MaxM % 8 == 0 && p.sxm == 1 && p.sxk % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  load_gather_rows(kb);
  SliceOutputs<T, MaxM> outputs(w, p, work);
  FinalizeCursor<T> fill = pruned_share<T>(w, p);
  for (int k0 = kb; k0 < ke; k0 += Shape::kChunkRows) {
    const int k1 = min(ke, k0 + Shape::kChunkRows);
    int k = k0 + slot;
    load_batch(k, k1);
    __syncthreads();  // the previous chunk is fully read
    float gathered[Shape::kGatherRows][MaxM];
#pragma unroll
    for (int j = 0; j < Shape::kGatherRows; ++j) gather_x_row<T>(x, p, gather_rows[j], M, x_vec, gathered[j]);
#pragma unroll
    for (int j = 0; j < Shape::kGatherRows; ++j) {
      float* dst = s_x + (j * kGemvThreads + tid) * MaxM;
      if constexpr (MaxM % 4 == 0) {
#pragma unroll
        for (int m = 0; m < MaxM; m += 4) {
          *reinterpret_cast<float4*>(dst + m) =
              make_float4(gathered[j][m], gathered[j][m + 1], gathered[j][m + 2], gathered[j][m + 3]);
        }
      } else {
#pragma unroll
        for (int m = 0; m < MaxM; ++m) dst[m] = gathered[j][m];
      }
    }
    load_gather_rows(k0 + Shape::kChunkRows);
    __syncthreads();
    for (; k < k1; k += kRowSlots * kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int row = k + u * kRowSlots;
        if (row >= k1) break;
        multiply_row<T, MaxM>(acc, v[u], s_x + (row - k0) * MaxM);
      }
      if (k + kRowSlots * kUnroll < k1) load_batch(k + kRowSlots * kUnroll, k1);
    }
  }

  finish_cuda_core_slice<T, MaxM>(acc, s_x, outputs, fill, w, p);
}

// The end of a row-share CTA (RowShares > 1): its lanes' sums of all 32 * RowShares columns folded (row lanes of
// the warp, then the warps, through the staging), then each slice's sums pushed into the shared memory of the CTA
// that finishes that slice, at this CTA's share of `shares` ([share][slice column], zeros past RowShares). After the
// cluster barrier each CTA finishes its own slice from the shares, as a slice CTA does from its warps' sums.
template <typename T, int RowShares>
__device__ __forceinline__ void finish_row_share(float (&acc)[1][8], float* s_x, float* shares,
                                                 SliceOutputs<T, 1>& outputs, FinalizeCursor<T>& fill,
                                                 const PackedTile& w, const Problem& p) {
  constexpr int kLanesN = 4 * RowShares, kCols = kGemvSliceCols * RowShares;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  outputs.fetch_biases(p);
  fill.fetch_bias(p);
#pragma unroll
  for (int e = 0; e < 8; ++e)
#pragma unroll
    for (int off = kLanesN; off < 32; off <<= 1) acc[0][e] += __shfl_xor_sync(0xffffffffu, acc[0][e], off);
  __syncthreads();  // the staging is reused for the warps' sums, [warp][column]
  if (lane < kLanesN) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_x[warp * kCols + lane * 8 + e] = acc[0][e];
  }
  __syncthreads();
  cluster_wait();  // every CTA of the cluster has started (it arrived when it did)
  if (threadIdx.x < kCols) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kGemvWarps; ++i) s += s_x[i * kCols + threadIdx.x];
    const int share = blockIdx.x % RowShares;  // the CTA's rank in its cluster
    store_to_cluster_cta(shares + share * kGemvSliceCols + threadIdx.x % kGemvSliceCols,
                         threadIdx.x / kGemvSliceCols, s);
  }
  cluster_sync();
  outputs.finish(shares, w, p);
  while (!fill.done()) fill.step(w, p);
}

// M = 1 with all of x staged (K < kGemvStageFloats) when the CTA starts: the kept rows' values and their row
// indices then stream together, and each value row reads its x from the staging by that index, so no load waits for
// a row index before x is gathered (the gathering kernel's chain: tile bounds, row indices, rows of x, and only then
// the first multiply). Entry K of the staging holds a zero for the padding rows (index -1).
// RowShares = 1: the CTA reads its 32-column slice over the tile's kept rows (64-byte pieces of each row).
// RowShares = G / 32: the tile's CTAs form a cluster and split its kept rows instead of its columns, so each reads a
// contiguous block of whole rows; the cluster then adds the shares' sums (finish_row_share).
template <typename T, int RowShares>
__global__ void __launch_bounds__(kGemvThreads)
    tw_gemv_whole_x_kernel(PackedTile w, Problem p, int k_split, const __grid_constant__ TileBounds bounds) {
  constexpr int MaxM = 1;
  constexpr int kCols = 8, kLanesN = 4 * RowShares, kRowSlots = kGemvThreads / kLanesN;
  constexpr int kUnroll = GemvShape<MaxM>::kUnroll;
  allow_dependent_launch();  // a finalize pass may follow
  __shared__ __align__(16) float s_x[kGemvStageFloats];
  __shared__ float s_shares[RowShares > 1 ? kGemvWarps * kGemvSliceCols : 1];
  const SliceWork work(w, k_split, bounds);
  if constexpr (RowShares > 1) cluster_arrive_relaxed();  // this CTA has started: its peers may store into it
  const int tid = threadIdx.x;
  const int per_share = (work.ke - work.kb + RowShares - 1) / RowShares;
  const int kb = work.kb + work.slice % RowShares * per_share, ke = min(work.ke, kb + per_share);
  const int lane_n = tid % kLanesN;
  const int c0 = work.slice / RowShares * kGemvSliceCols * RowShares + lane_n * kCols;  // first column in the tile
  const T* vals = static_cast<const T*>(w.values) + static_cast<int64_t>(work.p0) * w.granularity + c0;
  const int* rows = w.rows + work.p0;
  if constexpr (RowShares > 1) {
    if (tid >= RowShares * kGemvSliceCols) s_shares[tid] = 0.0f;  // the shares past RowShares add nothing
  }

  uint4 v[kUnroll];
  int x_row[kUnroll];
  auto load_batch = [&](int k) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = k + u * kRowSlots;
      if (row < ke) {
        v[u] = __ldg(reinterpret_cast<const uint4*>(vals + static_cast<int64_t>(row) * w.granularity));
        x_row[u] = __ldg(rows + row);
      }
    }
  };
  int k = kb + tid / kLanesN;
  load_batch(k);
  SliceOutputs<T, MaxM> outputs(w, p, work);
  FinalizeCursor<T> fill = pruned_share<T>(w, p);

  const T* x = static_cast<const T*>(p.x);
  const int K = static_cast<int>(w.K);
  if (p.sxk == 1 && K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    for (int k8 = tid * 8; k8 < K; k8 += kGemvThreads * 8) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(x + k8));
      const T* h = reinterpret_cast<const T*>(&q);
#pragma unroll
      for (int e = 0; e < 8; ++e) s_x[k8 + e] = to_float(h[e]);
    }
  } else {
#pragma unroll 4
    for (int kk = tid; kk < K; kk += kGemvThreads) s_x[kk] = to_float(x[static_cast<int64_t>(kk) * p.sxk]);
  }
  if (tid == 0) s_x[K] = 0.0f;
  __syncthreads();

  float acc[MaxM][kCols] = {};
  for (; k < ke; k += kRowSlots * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k + u * kRowSlots >= ke) break;
      multiply_row<T, MaxM>(acc, v[u], s_x + (x_row[u] < 0 ? K : x_row[u]));
    }
    if (k + kRowSlots * kUnroll < ke) load_batch(k + kRowSlots * kUnroll);
  }
  if constexpr (RowShares == 1) {
    finish_cuda_core_slice<T, MaxM>(acc, s_x, outputs, fill, w, p);
  } else {
    finish_row_share<T, RowShares>(acc, s_x, s_shares, outputs, fill, w, p);
  }
}

// Tensor cores (x feature-major with 16-byte rows, from kGemvMaxM rows up to kMmaGemvMaxM): each CTA owns a slice of
// 32 columns of one tile over the tile's kept K and 16 * Frags rows of x (blockIdx.z picks them); x's rows fill the
// 16 rows of Frags m16n8k16 MMAs and the slice's 32 columns four n8 fragments. Warp `warp` takes the K steps of 16
// kept rows warp, warp + 8, ... in batches of kMmaBatch, with no CTA barrier in its main loop: into its own
// shared-memory stages it copies a batch's packed values (16-byte cp.async) and gathers the batch's kept rows of x
// (Frags 16-byte copies per lane and step, zeros past M and for padding rows), from row indices loaded a batch ahead,
// while it multiplies the batches before: a ring of two batches (one in flight while the other is multiplied), or of
// four where an SM holds one CTA. At M <= kSmallM (Frags = 1) two-step batches in rings of two leave room for three
// CTAs per SM, so the 344 CTAs of a 4096 x 11008 weight run in one round. Measured on an H200
// (bench/results/tw_h200_gemv_mma.md): values loaded straight into registers (8 bytes per lane, as the B fragments
// need them) streamed 14-21% slower; four-step batches with two CTAs per SM were 2-7% faster at 40-50% sparsity but
// 9% slower at 30% and 8-28% slower on the even tiles of vector-wise N:M.
//
// Two slices per K step (Cols = kMmaGemvWideCols, at M <= kSmallM on tiles of 64 or 128 columns): a warp's K step
// then spans 64 columns, so each kept row of x it gathers serves twice the values, and the tile's CTAs keep their
// count by pairing up in clusters whose two CTAs share out the kept rows of their 64 columns (one-step batches keep
// three CTAs per SM). Each CTA pushes the sums of its partner's slice into the partner's shared memory and finishes
// its own. Measured on an H200 (bench/results/tw_h200_gemv16_anatomy.md), the 16-row GEMV at 50% sparsity took 19.9
// us with the x gather and 16.1 without it, next to 16.0 for the one-row GEMV; 64-column steps gather half of that.
//
// Past kSmallM rows (Frags = 2, 32 rows per CTA) the call stays one launch, with neither workspace nor finalize pass:
// where the warp-specialized kernel split K over a few items (LSTM gates, M = 128), zeroing a workspace, the GEMM
// and a finalize pass were three launches for a few microseconds of work. Its 32 x 32 sums leave through the staged
// tile of the mma.sync kernel (16-byte runs along y), whose column list and biases are staged when the CTA starts.
// Measured on an H200 (bench/results/tw_h200_mid_m_gemv_sweep.md), 64 rows per CTA (four fragments) were slower than
// 32 wherever either beat the warp-specialized kernel.
constexpr int kMmaBatch = 2;          // K steps per batch of 32 columns (one step per batch when wider)
constexpr int kMmaGemvCtasPerSm = 3;  // resident at once: the registers and shared memory are sized for it
constexpr int kMmaGemvDeepRing = 4;   // batches in a warp's ring where an SM holds one CTA (launch_mma_gemv_16)
constexpr int kMmaGemvWideCols = 64;  // columns of a K step at 16 rows on tiles of 64 or 128 (launch_mma_gemv_16)

template <int Frags, int Batches = 2, int Cols = kGemvSliceCols>
struct MmaGemvShape {
  static constexpr int kRows = 16 * Frags;                       // rows of x (m) per CTA
  static constexpr int kXChunks = kRows / 8;                     // 16-byte chunks per gathered kept row
  static constexpr int kXBytes = 16 * kRows * 2;                 // one step's gathered x, [16 kept rows][kRows m]
  static constexpr int kShares = Cols / kGemvSliceCols;          // CTAs of a cluster, each on a share of the kept rows
  static constexpr int kValueChunks = Cols / 8;                  // 16-byte chunks per row of a step's values
  static constexpr int kValueBytes = 16 * Cols * 2;              // one step's packed values, [16 rows][Cols columns]
  static constexpr int kStepBytes = kXBytes + kValueBytes;
  static constexpr int kBatchSteps = Cols == kGemvSliceCols ? kMmaBatch : 1;  // K steps per batch
  static constexpr int kWarpBytes = Batches * kBatchSteps * kStepBytes;  // a ring of Batches batches of stages
  static constexpr int kRingBytes = kGemvWarps * kWarpBytes;
  using Staged = StagedTile<kRows, kGemvSliceCols>;
  static constexpr int kPartialLd = Cols + 8;  // [warp][m][column], padded: conflict-free float2 stores
  // Past one slice, the slice sums that the cluster's CTAs push in, [share][m][slice column], after the ring: no CTA
  // writes there but its peers.
  static constexpr int kSharesBytes = kShares == 1 ? 0 : kShares * kRows * kGemvSliceCols * 4;
  static constexpr int kSmemBytes = kRingBytes + kSharesBytes + (Frags == 1 ? 0 : static_cast<int>(Staged::kBytes));
  static_assert(Batches > 2 || kMmaGemvCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "CTAs per Hopper SM (1 KB reserved each)");
  static_assert(kSmemBytes <= 227 * 1024, "a CTA's shared memory on Hopper");
  static_assert(Frags == 1 || Frags == 2, "16 or 32 rows of x per CTA");
  static_assert(Batches == 2 || Frags == 1, "a deeper ring only at 16 rows");
  static_assert(Cols == kGemvSliceCols || (Frags == 1 && Cols == kMmaGemvWideCols), "wider steps at 16 rows only");
  static_assert(Frags > 1 || kSlicePartialFloats<kSmallM> * 4 <= kRingBytes, "the partial sums reuse the stages");
  static_assert((Frags == 1 && kShares == 1) || kGemvWarps * kRows * kPartialLd * 4 <= kRingBytes,
                "the partial sums reuse the stages");
};

// Stores a warp's accumulators as its partial sums, [m][kLd] from `partial`, in float2 runs: accumulator e of
// fragment (i, j) is m = 16i + g (+8 for e >= 2), column 8j + 2t4 + e % 2.
template <int kLd, int Frags, int ColFrags>
__device__ __forceinline__ void store_warp_sums(const float (&acc)[Frags][ColFrags][4], float* partial) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < Frags; ++i)
#pragma unroll
    for (int j = 0; j < ColFrags; ++j) {
      const int r = 16 * i + g, n = 8 * j + 2 * t4;
      *reinterpret_cast<float2*>(partial + r * kLd + n) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(partial + (r + 8) * kLd + n) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

// The end of a 16-row tensor-core GEMV CTA whose K steps span its cluster's kShares slices: the warps' sums of all
// its columns meet in its stages, and each slice's total goes into the shared memory of the CTA that finishes that
// slice, at this CTA's share. After the cluster barrier each CTA finishes its own slice from the shares, as a
// one-slice CTA does from its warps' sums.
template <typename T, typename Shape, int ColFrags>
__device__ __forceinline__ void finish_cluster_shares(const float (&acc)[1][ColFrags][4], unsigned char* smem,
                                                      SliceOutputs<T, kSmallM>& outputs, const PackedTile& w,
                                                      const Problem& p) {
  constexpr int kLd = Shape::kPartialLd, kShares = Shape::kShares, Cols = 8 * ColFrags;
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // the stages are reused for the partial sums, [warp][m][column]
  store_warp_sums<kLd>(acc, reinterpret_cast<float*>(smem) + warp * kSmallM * kLd);
  __syncthreads();
  const float* sums = reinterpret_cast<const float*>(smem);
  float* shares = reinterpret_cast<float*>(smem + Shape::kRingBytes);
  const int share = blockIdx.x % kShares;  // the CTA's rank in its cluster
  cluster_wait();  // every CTA of the cluster has started (it arrived when it did)
#pragma unroll
  for (int t = threadIdx.x; t < kSmallM * Cols; t += kGemvThreads) {
    const int m = t / Cols, c = t % Cols;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kGemvWarps; ++i) s += sums[(i * kSmallM + m) * kLd + c];
    store_to_cluster_cta(shares + (share * kSmallM + m) * kGemvSliceCols + c % kGemvSliceCols, c / kGemvSliceCols, s);
  }
  cluster_sync();
  outputs.template finish<kShares>(shares, w, p);
}

template <typename T, int Frags, int Batches, int Cols = kGemvSliceCols>
__global__ void __launch_bounds__(kGemvThreads, kMmaGemvCtasPerSm)
    tw_gemv_mma_kernel(PackedTile w, Problem p, int k_split, const __grid_constant__ TileBounds bounds) {
  using Shape = MmaGemvShape<Frags, Batches, Cols>;
  constexpr int kXChunks = Shape::kXChunks, kRowBytes = Shape::kRows * 2;
  constexpr int kShares = Shape::kShares, kValueChunks = Shape::kValueChunks, kBatchSteps = Shape::kBatchSteps;
  static_assert(Frags > 1 || kSmallM == 16, "one m16n8k16 row block holds every row of x");
  extern __shared__ __align__(128) unsigned char smem[];
  allow_dependent_launch();  // a finalize pass may follow
  const SliceWork work(w, k_split, bounds);
  // The CTA's columns: its slice, or the kShares slices of its cluster, whose kept rows (K steps) it shares with the
  // cluster's other CTAs; it finishes its own slice.
  const int p0 = work.p0;
  int kb = work.kb, steps = (work.ke - work.kb) / 16;
  if constexpr (kShares > 1) {
    cluster_arrive_relaxed();  // this CTA has started: its peers may store into it
    const int share = work.slice % kShares, share_steps = (steps + kShares - 1) / kShares;
    kb += min(steps, share * share_steps) * 16;
    steps = max(0, min(share_steps, steps - share * share_steps));
  }
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * Shape::kRows;
  constexpr int kBatchStride = kGemvWarps * kBatchSteps;  // steps between a warp's batches
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t stages = smem_addr(smem + warp * Shape::kWarpBytes);
  const auto stage = [&](int batch, int u) {
    return stages + ((batch % Batches) * kBatchSteps + u) * Shape::kStepBytes;
  };
  const auto step = [&](int batch, int u) { return warp + batch * kBatchStride + u * kGemvWarps; };
  float* s_c = reinterpret_cast<float*>(smem + Shape::kRingBytes);  // the staged tile (Frags > 1)
  if constexpr (Frags > 1) {
    Shape::Staged::template stage_columns<T, kGemvThreads>(s_c, w, p, blockIdx.x, threadIdx.x);
  }

  // Values: lane l copies 16-byte chunks l, l + 32, ... of a step's 16 rows x kValueChunks chunks, swizzled for
  // ldmatrix.
  constexpr int kValueCopies = 16 * kValueChunks / 32, kValueRowBytes = Cols * 2;
  const int64_t ld = w.granularity;
  const T* vals = static_cast<const T*>(w.values) + (p0 + kb) * ld + work.slice / kShares * Cols;
  int64_t value_src[kValueCopies];
  uint32_t value_dst[kValueCopies];
#pragma unroll
  for (int h = 0; h < kValueCopies; ++h) {
    const int chunk = lane + 32 * h, r = chunk / kValueChunks, c = chunk % kValueChunks;
    value_src[h] = r * ld + c * 8;
    value_dst[h] = Shape::kXBytes + r * kValueRowBytes + swizzle<kValueChunks>(r, c) * 16;
  }
  // x: lane l copies chunks l, l + 32, ... of the step's 16 kept rows x kXChunks chunks (8 m each).
  const int* rows = w.rows + p0 + kb;
  const T* x = static_cast<const T*>(p.x) + m0;
  int copy_row[Frags], x_bytes[Frags], x_offset[Frags];
  uint32_t x_dst[Frags];
#pragma unroll
  for (int h = 0; h < Frags; ++h) {
    const int chunk = lane + 32 * h, r = chunk / kXChunks, c = chunk % kXChunks;
    copy_row[h] = r;
    x_offset[h] = 8 * c;
    const int64_t left = p.M - m0 - 8 * c;  // rows of x from this chunk's first
    x_bytes[h] = left >= 8 ? 16 : (left > 0 ? static_cast<int>(left) * 2 : 0);
    x_dst[h] = r * kRowBytes + swizzle<kXChunks>(r, c) * 16;
  }
  // Kept-row indices of a batch, per step and copy (-1 past the warp's steps). The main loop holds those of the next
  // batch to gather and of the one after, so each batch's are requested a batch before they are needed.
  using BatchRows = int[kBatchSteps][Frags];
  auto load_rows = [&](int batch, BatchRows& out) {
#pragma unroll
    for (int u = 0; u < kBatchSteps; ++u) {
      const int s = step(batch, u);
#pragma unroll
      for (int h = 0; h < Frags; ++h) out[u][h] = s < steps ? __ldg(rows + s * 16 + copy_row[h]) : -1;
    }
  };
  auto copy_values = [&](int batch) {
#pragma unroll
    for (int u = 0; u < kBatchSteps; ++u) {
      const int s = step(batch, u);
      if (s >= steps) break;
#pragma unroll
      for (int h = 0; h < kValueCopies; ++h) {
        cp_async16_to(stage(batch, u) + value_dst[h], vals + s * 16 * ld + value_src[h], 16);
      }
    }
  };
  auto copy_x = [&](int batch, const BatchRows& x_rows) {
#pragma unroll
    for (int u = 0; u < kBatchSteps; ++u) {
#pragma unroll
      for (int h = 0; h < Frags; ++h) {
        const int row = x_rows[u][h];
        const bool ok = row >= 0 && x_bytes[h] > 0;
        const T* src = ok ? x + static_cast<int64_t>(row) * p.sxk + x_offset[h] : x;
        cp_async16_to(stage(batch, u) + x_dst[h], src, ok ? x_bytes[h] : 0);
      }
    }
  };
  // ldmatrix sources: A (x) rows a_row, chunk 2i + (q & 1) for fragment i; B (values) rows b_row, chunk b_chunk
  // (+2h for columns 16h..16h+15).
  const int li = lane & 7, q = lane >> 3;
  const int a_row = li + (q >> 1) * 8, b_row = li + (q & 1) * 8, b_chunk = q >> 1;
  uint32_t a_src[Frags], b_src[Cols / 16];
#pragma unroll
  for (int i = 0; i < Frags; ++i) a_src[i] = a_row * kRowBytes + swizzle<kXChunks>(a_row, 2 * i + (q & 1)) * 16;
#pragma unroll
  for (int h = 0; h < Cols / 16; ++h) {
    b_src[h] = Shape::kXBytes + b_row * kValueRowBytes + swizzle<kValueChunks>(b_row, b_chunk + 2 * h) * 16;
  }

  // At M <= kSmallM each thread finishes a few outputs of the slice itself, with their column indices requested now.
  auto outputs = [&] {
    if constexpr (Frags == 1) {
      return SliceOutputs<T, kSmallM>(w, p, work);
    } else {
      return 0;  // the staged tile finishes the outputs
    }
  }();
  FinalizeCursor<T> fill = pruned_share<T>(w, p);
  float acc[Frags][Cols / 8][4] = {};
  const int batches = steps > warp ? (steps - warp + kBatchStride - 1) / kBatchStride : 0;
  // The first Batches - 1 batches in flight at once: their values (which never come from the kernel before), then
  // their x, with the row indices of all of them and of the next two batches requested together.
  BatchRows first_rows[Batches - 1], next_rows, later_rows;
#pragma unroll
  for (int b = 0; b < Batches - 1; ++b) copy_values(b);
#pragma unroll
  for (int b = 0; b < Batches - 1; ++b) load_rows(b, first_rows[b]);
  load_rows(Batches - 1, next_rows);
  load_rows(Batches, later_rows);
  wait_for_prerequisite_grid();  // x may come from the transpose launched just before
#pragma unroll
  for (int b = 0; b < Batches - 1; ++b) {
    copy_x(b, first_rows[b]);
    cp_async_commit();
  }
  for (int batch = 0; batch < batches; ++batch) {
    copy_values(batch + Batches - 1);
    copy_x(batch + Batches - 1, next_rows);
    cp_async_commit();
#pragma unroll
    for (int u = 0; u < kBatchSteps; ++u)
#pragma unroll
      for (int h = 0; h < Frags; ++h) next_rows[u][h] = later_rows[u][h];
    load_rows(batch + Batches + 1, later_rows);
    cp_async_wait<Batches - 1>();  // this batch's copies are done
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kBatchSteps; ++u) {
      if (step(batch, u) >= steps) break;
      const uint32_t st = stage(batch, u);
      uint32_t a[Frags][4], b[Cols / 16][4];
#pragma unroll
      for (int i = 0; i < Frags; ++i) ldmatrix_x4_trans(a[i], st + a_src[i]);
#pragma unroll
      for (int h = 0; h < Cols / 16; ++h) ldmatrix_x4_trans(b[h], st + b_src[h]);
#pragma unroll
      for (int i = 0; i < Frags; ++i)
#pragma unroll
        for (int j = 0; j < Cols / 8; ++j) mma_16816<T>(acc[i][j], a[i], &b[j / 2][(j % 2) * 2]);
    }
    __syncwarp();  // the stages are read before the batch after next is copied into them
  }
  cp_async_wait<0>();

  fill.fetch_bias(p);
  if constexpr (kShares > 1) {
    outputs.fetch_biases(p);
    finish_cluster_shares<T, Shape>(acc, smem, outputs, w, p);
  } else if constexpr (Frags == 1) {
    outputs.fetch_biases(p);
    __syncthreads();  // the stages are reused for the partial sums, [warp][m][slice column]
    float* partial = reinterpret_cast<float*>(smem) + warp * kSmallM * kGemvSliceCols;
    const int g = lane >> 2, t4 = lane & 3;  // accumulator e of fragment j: m = g (+8 for e >= 2), 8j + 2t4 + e % 2
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        partial[(g + (e >> 1) * 8) * kGemvSliceCols + 8 * j + 2 * t4 + (e & 1)] = acc[0][j][e];
      }
    __syncthreads();
    outputs.finish(reinterpret_cast<const float*>(smem), w, p);
  } else {
    constexpr int kLd = Shape::kPartialLd;
    __syncthreads();  // the stages are reused for the partial sums
    store_warp_sums<kLd>(acc, reinterpret_cast<float*>(smem) + warp * Shape::kRows * kLd);
    __syncthreads();
    const bool feature_major_out = p.sym == 1;
    const float* sums = reinterpret_cast<const float*>(smem);
    for (int it = threadIdx.x; it < Shape::kRows * kGemvSliceCols / 2; it += kGemvThreads) {
      const int r = it / (kGemvSliceCols / 2), n = 2 * (it % (kGemvSliceCols / 2));
      float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int i = 0; i < kGemvWarps; ++i) {
        const float2 v = *reinterpret_cast<const float2*>(sums + (i * Shape::kRows + r) * kLd + n);
        s.x += v.x;
        s.y += v.y;
      }
      Shape::Staged::put(s_c, r, n, s.x, s.y, feature_major_out);
    }
    __syncthreads();
    store_tile<T, Shape::kRows, kGemvSliceCols, kGemvThreads>(s_c, w, p, m0, feature_major_out, threadIdx.x);
  }
  while (!fill.done()) fill.step(w, p);
}

// K splits of the GEMVs: none unless their CTAs would fill less than half the GPU, then enough for about two CTAs
// per SM, each with at least 256 kept rows.
int gemv_splits(const PackedTile& w, const Problem& p) {
  const int64_t ctas = static_cast<int64_t>(w.num_tiles) * (w.granularity / kGemvSliceCols);
  if (2 * ctas >= p.num_sms) return 1;
  return static_cast<int>(std::min<int64_t>(cdiv(2 * p.num_sms, ctas), std::max(1, w.max_tile_k / 256)));
}

// CTAs of kKernel (kGemvThreads threads, kDynamicSmem bytes of dynamic shared memory) that one SM holds at once, by
// its registers and shared memory, asked once per process (the devices of a process are assumed alike).
template <auto kKernel, int kDynamicSmem = 0>
int resident_ctas_per_sm() {
  static const int ctas = [] {
    int n = 0;
    const bool asked = (kDynamicSmem == 0 || allow_dynamic_smem<kKernel, kDynamicSmem>() == nullptr) &&
                       cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kGemvThreads, kDynamicSmem) ==
                           cudaSuccess;
    return asked ? std::max(1, n) : 1;
  }();
  return ctas;
}

// Tensor-core GEMV CTAs of 32 rows that one SM holds at once: kMmaGemvCtasPerSm on Hopper (MmaGemvShape checks its
// shared memory), fewer where an SM has less. Both element types take the same registers and shared memory.
int mma_gemv_ctas_per_sm() {
  return resident_ctas_per_sm<tw_gemv_mma_kernel<__half, 2, 2>, MmaGemvShape<2>::kSmemBytes>();
}

// Clusters of Cluster CTAs of kKernel (kDynamicSmem bytes of dynamic shared memory each) that the device holds at
// once, asked once per process (0 if the device takes no clusters).
template <auto kKernel, int Cluster, int kDynamicSmem = 0>
int resident_clusters() {
  static const int clusters = [] {
    if (kDynamicSmem > 0 && allow_dynamic_smem<kKernel, kDynamicSmem>() != nullptr) return 0;
    const LaunchConfig launch(dim3(Cluster), dim3(kGemvThreads), kDynamicSmem, nullptr, false, Cluster);
    int n = 0;
    return cudaOccupancyMaxActiveClusters(&n, kKernel, launch.get()) == cudaSuccess ? n : 0;
  }();
  return clusters;
}

// The row-share GEMV, a tile's G / 32 slice CTAs (Cluster of them) in one cluster, where the tiles are Cluster slices
// wide and every cluster fits one round; nothing launched (nullopt) otherwise.
template <typename T, int Cluster>
std::optional<const char*> launch_row_shares(const PackedTile& w, const Problem& p, dim3 grid, int k_split,
                                             const TileBounds& bounds) {
  constexpr auto kKernel = tw_gemv_whole_x_kernel<T, Cluster>;
  const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y;
  if (w.granularity != Cluster * kGemvSliceCols || ctas > int64_t{Cluster} * resident_clusters<kKernel, Cluster>()) {
    return std::nullopt;
  }
  return LaunchConfig(grid, dim3(kGemvThreads), 0, p.stream, false, Cluster).launch(kKernel, w, p, k_split, bounds);
}

template <typename T, int Frags, int Batches, int Cols = kGemvSliceCols>
const char* launch_mma_gemv(const PackedTile& w, const Problem& p, dim3 grid, int k_split, const TileBounds& bounds) {
  constexpr auto kKernel = tw_gemv_mma_kernel<T, Frags, Batches, Cols>;
  using Shape = MmaGemvShape<Frags, Batches, Cols>;
  if (const char* err = allow_dynamic_smem<kKernel, Shape::kSmemBytes>()) return err;
  grid.z = cdiv(p.M, Shape::kRows);
  return LaunchConfig(grid, dim3(kGemvThreads), Shape::kSmemBytes, p.stream, p.x_from_prior_kernel, Shape::kShares)
      .launch(kKernel, w, p, k_split, bounds);
}

// Up to 16 rows: K steps of two slices where the tiles are 64 or 128 columns wide, the slices fill at least half
// the SMs without a K split and the clusters fit one round. Against 32-column steps on an H200 at 4096 x 11008
// (bench/results/tw_h200_gemv_wide.md), 10-19% faster at 30-75% sparsity and 6-7% at 90%; vector-wise 2:8 and 2:4
// with V = 64 or 128 at 16 rows 13-20%. On a grid of a few CTAs (LSTM gates at 16 rows and 90%, 24 CTAs) they were
// 8% slower than the ring of four (bench/results/tw_h200_gemv_wide_first.md, before the half-the-SMs condition).
// Otherwise a ring of four batches per warp where no SM holds more than one CTA (and the device gives a CTA its
// 96 KB), else two. Measured on an H200 at 4096 x 11008 (bench/results/tw_h200_gemv_ring_trial.md), four batches
// took 4% off 90% sparsity (112 CTAs) and were level or 1-2% slower at 50-75% (172-244 CTAs, two per SM); eight,
// with all of a warp's batches in flight at 90%, were 12-14% slower. With this rule 90% went 7-8% faster than
// before (bench/results/tw_h200_gemv_ring.md, with the tile pointers as a parameter). The same rule for blocks of
// 32 rows was 7-12% slower wherever it took four (bench/results/tw_h200_gemv_ring32.md: LSTM gates at 128 rows).
template <typename T>
const char* launch_mma_gemv_16(const PackedTile& w, const Problem& p, dim3 grid, int k_split,
                               const TileBounds& bounds) {
  constexpr auto kWide = tw_gemv_mma_kernel<T, 1, 2, kMmaGemvWideCols>;
  using Wide = MmaGemvShape<1, 2, kMmaGemvWideCols>;
  const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y;
  if (w.granularity % kMmaGemvWideCols == 0 && grid.y == 1 && 2 * ctas >= p.num_sms &&
      ctas <= int64_t{Wide::kShares} * resident_clusters<kWide, Wide::kShares, Wide::kSmemBytes>()) {
    return launch_mma_gemv<T, 1, 2, kMmaGemvWideCols>(w, p, grid, k_split, bounds);
  }
  constexpr auto kDeep = tw_gemv_mma_kernel<T, 1, kMmaGemvDeepRing>;
  const bool deep = ctas <= p.num_sms &&
                    allow_dynamic_smem<kDeep, MmaGemvShape<1, kMmaGemvDeepRing>::kSmemBytes>() == nullptr;
  return deep ? launch_mma_gemv<T, 1, kMmaGemvDeepRing>(w, p, grid, k_split, bounds)
              : launch_mma_gemv<T, 1, 2>(w, p, grid, k_split, bounds);
}

TileBounds tile_bounds(const PackedTile& w) {
  TileBounds bounds{};
  if (w.host_tile_ptr != nullptr && w.num_tiles <= kParamTiles) {
    bounds.count = w.num_tiles;
    std::copy(w.host_tile_ptr, w.host_tile_ptr + w.num_tiles + 1, bounds.ptr);
  }
  return bounds;
}

template <typename T>
const char* launch_typed(const PackedTile& w, const Problem& p, const Plan& plan) {
  const int k_split = std::max(kKStep, cdiv(cdiv(w.max_tile_k, plan.splits), kKStep) * kKStep);
  const dim3 grid(w.num_tiles * (w.granularity / kGemvSliceCols), plan.splits);
  const TileBounds bounds = tile_bounds(w);
  if (plan.path == Path::kGemvMma) {  // 16 rows of x per CTA up to kSmallM (gemv_plan), else 32 (mma_gemv_plan)
    return plan.block_m == MmaGemvShape<1>::kRows ? launch_mma_gemv_16<T>(w, p, grid, k_split, bounds)
                                                  : launch_mma_gemv<T, 2, 2>(w, p, grid, k_split, bounds);
  }
  const auto run = [&](auto kernel) {
    kernel<<<grid, kGemvThreads, 0, p.stream>>>(w, p, k_split, bounds);
    return check_launch();
  };
  // x staged whole where all CTAs run in one round: measured on an H200 (bench/results/tw_h200_gemv_whole_x.md),
  // 2-8% faster at 50-90% sparsity on 4096 x 11008, 4.5% slower at 30%, whose CTAs take two rounds.
  const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y;
  if (p.M <= 1 && w.K < kGemvStageFloats) {
    if (plan.splits == 1 && w.value_rows >= int64_t{kRowShareMinMeanK} * w.num_tiles && sm90_or_later()) {
      if (const auto launched = launch_row_shares<T, 4>(w, p, grid, k_split, bounds)) return *launched;  // G = 128
      if (const auto launched = launch_row_shares<T, 2>(w, p, grid, k_split, bounds)) return *launched;  // G = 64
    }
    constexpr auto kWholeX = tw_gemv_whole_x_kernel<T, 1>;
    if (ctas <= resident_ctas_per_sm<kWholeX>() * int64_t{p.num_sms}) return run(kWholeX);
  }
  if (p.M <= 1) return run(tw_gemv_kernel<T, 1>);
  if (p.M <= 2) return run(tw_gemv_kernel<T, 2>);
  if (p.M <= 4) return run(tw_gemv_kernel<T, 4>);
  if (p.M <= 8) return run(tw_gemv_kernel<T, 8>);
  return run(tw_gemv_kernel<T, 16>);
}

}  // namespace

Plan gemv_plan(const PackedTile& w, const Problem& p) {
  const bool x_rows16 = p.sxm == 1 && p.sxk % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  Plan plan{};
  plan.path = p.M > kGemvMaxM && x_rows16 ? Path::kGemvMma : Path::kGemv;
  plan.block_m = kSmallM;
  plan.splits = gemv_splits(w, p);
  return plan;
}

// Up to 32 rows the tensor-core GEMV reads each packed value once, as at decode sizes, and it was as fast as the
// warp-specialized kernel's 64-row items or faster on every measured weight (up to 4096 x 11008 at 30% sparsity).
// Past that it rereads the values for every 32 rows. While all its CTAs ran in one round it was 3-63% faster at 128
// and 256 rows, but for one case 3% slower (LSTM gates, 256 rows at 50%: 2.9 CTAs per SM); from 3.4 CTAs per SM it
// took 1.4-3.3 times as long (bench/results/tw_h200_mid_m_gemv_sweep.md, M 32-256 on an H200). One round is what
// this device's SMs hold: three CTAs each on Hopper, fewer where an SM has less shared memory.
// Nor does it pay where an SM walks many kept rows (its CTAs' count times the longest tile's kept rows), while the
// warp-specialized kernel splits K over the whole GPU. On vector-wise N:M at 64-256 rows (K 1024-8192, N 1024, an
// H200, bench/results/nm_vw_h200_mid_m.md) it took 0.52-0.88 of that kernel's time wherever an SM walked up to 2048
// kept rows, and 1.17-1.61 times as long wherever it walked 4096 or more (a tile of 4096 kept rows at 64 rows: 13.0
// against 10.1 us).
constexpr int64_t kMmaGemvMaxRowsPerSm = 3072;
std::optional<Plan> mma_gemv_plan(const PackedTile& w, const Problem& p) {
  if (p.path != Path::kGemvMma) {
    if (p.path != Path::kAuto || p.M > kMmaGemvMaxM) return std::nullopt;
    const int64_t slices = static_cast<int64_t>(w.num_tiles) * (w.granularity / kGemvSliceCols);
    const int blocks = cdiv(p.M, MmaGemvShape<2>::kRows);
    const int64_t ctas = slices * blocks;
    if (blocks > 1 && ctas > int64_t{mma_gemv_ctas_per_sm()} * p.num_sms) return std::nullopt;
    if (blocks > 1 && int64_t{cdiv(ctas, p.num_sms)} * w.max_tile_k > kMmaGemvMaxRowsPerSm) return std::nullopt;
  }
  Plan plan{};
  plan.path = Path::kGemvMma;
  plan.block_m = MmaGemvShape<2>::kRows;
  plan.splits = 1;
  return plan;
}

const char* launch_gemv(const PackedTile& w, const Problem& p, const Plan& plan) {
  return p.dtype == DType::kHalf ? launch_typed<__half>(w, p, plan) : launch_typed<__nv_bfloat16>(w, p, plan);
}

}  // namespace tw
}  // namespace sparseprune
