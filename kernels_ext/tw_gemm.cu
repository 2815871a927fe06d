// Tile-wise (TW/TEW) sparse GEMM: host planning, the mma.sync path (m16n8k16, sm_80+), the small-M GEMV and
// the finalize pass. The Hopper wgmma paths live in tw_gemm_sm90.cu (every thread loads and multiplies) and
// tw_gemm_sm90_ws.cu (warp-specialized and persistent, the default on Hopper).
//
// Every tile is a dense GEMM over its own kept K rows, so one launch covers all tiles: a CTA takes (tile, M block,
// K split), gathers the tile's kept rows of the feature-major activations xT (K x M) with 16-byte cp.async (each
// kept row is a contiguous run of M, so the gather is coalesced), streams the tile's dense values, and writes its
// G output columns through `cols`. Tiles come sorted by kept K, heaviest first, so the block scheduler balances
// them over the SMs. Small M is bound by the weight bytes instead: a GEMV on CUDA cores up to kGemvMaxM rows, a
// 16-row mma.sync configuration with short, equal K splits above.
#include <algorithm>
#include <type_traits>

#include "tw_device.cuh"

namespace sparseprune {
namespace tw {
namespace {

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b);
template <>
__device__ __forceinline__ void mma_16816<__half>(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// XOR swizzle of 16-byte chunks inside a shared-memory row of `Chunks` chunks: the 8 rows one ldmatrix reads
// at the same logical chunk land in 8 different bank groups.
template <int Chunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(Chunks >= 2, "rows of at least 32 bytes");
  if constexpr (Chunks >= 8) {
    return chunk ^ (row & 7);
  } else if constexpr (Chunks == 4) {
    return chunk ^ ((row >> 1) & 3);
  } else {
    return chunk ^ ((row >> 2) & 1);
  }
}

// StagedRows > 0 (the small-M configurations): every K split is StagedRows kept rows long, whatever the tile's kept
// K, and a CTA first copies its rows' indices into shared memory. Their K steps are so short that fetching each
// step's indices one step ahead put that load's latency on every step, and that splitting each tile into the same
// number of pieces left the CTAs of the heaviest tiles streaming long after the others had finished.
template <int BM, int BN, int WarpsM, int WarpsN, int Stages, int StagedRows = 0>
struct MmaConfig {
  static constexpr int kBM = BM, kBN = BN, kBK = kKStep, kStages = Stages, kStagedRows = StagedRows;
  static constexpr int kThreads = WarpsM * WarpsN * 32;
  static constexpr int kWM = BM / WarpsM, kWN = BN / WarpsN;
  static constexpr int kMI = kWM / 16, kNI = kWN / 8;
  static constexpr int kAChunks = BM / 8, kBChunks = BN / 8;
  // A-loader chunks per thread; with fewer chunks than threads (16-row blocks) only the first threads load A.
  static constexpr int kAIters = (kBK * kAChunks + kThreads - 1) / kThreads;
  static constexpr int kPipeBytes = Stages * kBK * (BM + BN) * 2 + StagedRows * 4;
  static constexpr int kEpiBytes = StagedTile<BM, BN>::kBytes;
  static constexpr int kSmemBytes = kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes;
  static_assert(kNI % 2 == 0 && kWM % 16 == 0, "warp tile");
  static_assert(kBK * kAChunks % kThreads == 0 || kAIters == 1, "A loader split");
  static_assert(StagedRows % kBK == 0, "whole K steps of staged indices");
};

// One CTA = (tile, M block, K split) of the tensor-core path; x is feature-major: x[k*ldx + m].
template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads)
    tw_mma_kernel(PackedTile w, Problem p, int m_blocks, int splits, bool feature_major_out) {
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, BK = Cfg::kBK, kStages = Cfg::kStages;
  constexpr int kThreads = Cfg::kThreads, kWarpsN = BN / Cfg::kWN;
  constexpr int MI = Cfg::kMI, NI = Cfg::kNI, ACH = Cfg::kAChunks, BCH = Cfg::kBChunks;
  extern __shared__ __align__(128) unsigned char smem[];
  T* s_a = reinterpret_cast<T*>(smem);
  T* s_b = s_a + kStages * BK * BM;

  allow_dependent_launch();  // a finalize pass may follow
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int mb = blockIdx.x % m_blocks;
  const int rest = blockIdx.x / m_blocks;
  const int split = rest % splits, tile = rest / splits;

  const T* x = static_cast<const T*>(p.x);
  const T* vals = static_cast<const T*>(w.values);
  const int64_t ldx = p.sxk, M = p.M, m0 = static_cast<int64_t>(mb) * BM;
  const int p0 = w.tile_ptr[tile];
  const int ksteps = (w.tile_ptr[tile + 1] - p0) / BK;
  const int per_split = Cfg::kStagedRows > 0 ? Cfg::kStagedRows / BK : (ksteps + splits - 1) / splits;
  const int s0 = split * per_split, s1 = min(ksteps, s0 + per_split);
  if (splits > 1 && s0 >= s1) return;  // the workspace already holds zeros for this slice

  // The CTA's kept-row indices in shared memory (StagedRows > 0).
  int* s_rows = reinterpret_cast<int*>(s_b + kStages * BK * BN);
  if constexpr (Cfg::kStagedRows > 0) {
    const int4* src = reinterpret_cast<const int4*>(w.rows + p0 + s0 * BK);
    for (int i = tid; i < max(0, s1 - s0) * BK / 4; i += kThreads) {
      cp_async16(s_rows + i * 4, src + i, 16);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }
  int row_idx[Cfg::kAIters];  // kept-row indices of the next stage to issue, fetched one step early
  auto fetch_rows = [&](int ks) {
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int r = (tid + j * kThreads) / ACH;
      if (r >= BK || ks >= s1) {
        row_idx[j] = -1;
      } else if constexpr (Cfg::kStagedRows > 0) {
        row_idx[j] = ld_shared_s32(s_rows + (ks - s0) * BK + r);
      } else {
        row_idx[j] = w.rows[p0 + ks * BK + r];
      }
    }
  };
  auto load_stage = [&](int stage, int ks) {
    T* sa = s_a + stage * BK * BM;
    T* sb = s_b + stage * BK * BN;
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int i = tid + j * kThreads, r = i / ACH, c = i % ACH;
      if (r >= BK) break;  // only where the A tile has fewer chunks than the CTA has threads
      const int64_t m = m0 + c * 8;
      const bool ok = row_idx[j] >= 0 && m < M;
      const T* src = ok ? x + static_cast<int64_t>(row_idx[j]) * ldx + m : x;
      cp_async16(sa + r * BM + swizzle<ACH>(r, c) * 8, src, ok ? 16 : 0);
    }
    const T* vsrc = vals + static_cast<int64_t>(p0 + ks * BK) * BN;
#pragma unroll
    for (int i = tid; i < BK * BCH; i += kThreads) {
      const int r = i / BCH, c = i % BCH;
      cp_async16(sb + r * BN + swizzle<BCH>(r, c) * 8, vsrc + r * BN + c * 8, 16);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  wait_for_prerequisite_grid();  // x may come from the transpose launched just before
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s0 + s < s1) {
      fetch_rows(s0 + s);
      load_stage(s, s0 + s);
    }
    cp_async_commit();
  }
  fetch_rows(s0 + kStages - 1);

  const int li = lane & 7, q = lane >> 3;
  for (int ks = s0; ks < s1; ++ks) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int kn = ks + kStages - 1;
    if (kn < s1) load_stage((kn - s0) % kStages, kn);
    cp_async_commit();
    fetch_rows(kn + 1);

    const T* sa = s_a + ((ks - s0) % kStages) * BK * BM;
    const T* sb = s_b + ((ks - s0) % kStages) * BK * BN;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int k = kk + li + (q >> 1) * 8;
        const int mc = (wm * Cfg::kWM + i * 16 + (q & 1) * 8) / 8;
        ldmatrix_x4_trans(af[i], sa + k * BM + swizzle<ACH>(k, mc) * 8);
      }
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        const int k = kk + li + (q & 1) * 8;
        const int nc = (wn * Cfg::kWN + j * 16 + (q >> 1) * 8) / 8;
        uint32_t r[4];
        ldmatrix_x4_trans(r, sb + k * BN + swizzle<BCH>(k, nc) * 8);
        bf[2 * j][0] = r[0];
        bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2];
        bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_16816<T>(acc[i][j], af[i], bf[j]);
    }
  }
  cp_async_wait<0>();

  const int g = lane >> 2, t4 = lane & 3;
  if (splits > 1) {  // partial sums into the workspace; the finalize kernel applies the epilogue
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t m = m0 + wm * Cfg::kWM + i * 16 + g + (e >> 1) * 8;
          const int n = wn * Cfg::kWN + j * 8 + 2 * t4 + (e & 1);
          if (m < M) atomicAdd(p.workspace + ws_index(w, p, m, static_cast<int64_t>(tile) * BN + n), acc[i][j][e]);
        }
    return;
  }

  // Direct epilogue: stage fp32 results in shared memory, then write G columns through `cols`.
  __syncthreads();
  using Staged = StagedTile<BM, BN>;
  float* s_c = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int r = wm * Cfg::kWM + i * 16 + g, n = wn * Cfg::kWN + j * 8 + 2 * t4;
      Staged::put(s_c, r, n, acc[i][j][0], acc[i][j][1], feature_major_out);
      Staged::put(s_c, r + 8, n, acc[i][j][2], acc[i][j][3], feature_major_out);
    }
  Staged::template stage_columns<T, kThreads>(s_c, w, p, tile, tid);
  __syncthreads();

  store_tile<T, BM, BN, kThreads>(s_c, w, p, m0, feature_major_out, tid);
  fill_pruned_share<T, (BM > kSmallM)>(w, p, static_cast<int64_t>(blockIdx.x) * kThreads + tid,
                                       static_cast<int64_t>(gridDim.x) * kThreads);
}

// Small M (memory bound): CTA = (tile, slice of kGemvSliceCols columns, K split). Each lane streams value vectors
// of Cols columns (16 bytes; 8 bytes for M > 4, so the MaxM x Cols accumulators fit beside more loads in flight)
// from rows kRowSlots apart, so a warp reads whole 64-byte row segments. The tile's kept rows of x are gathered
// into shared memory as fp32, [row][MaxM], one chunk at a time: the inner loop then reads x with one broadcast
// shared load per row instead of a dependent global load per row and m. Each thread gathers a few whole rows per
// chunk with all their loads in flight at once, from row indices it loaded a chunk ahead, and the chunk's first
// value loads are issued before the gather: a gather that walked the chunk element by element, each load waiting
// for its row index, set the kernel's length. Without a K split the CTA finishes its columns (bias, residual,
// activation) and then takes its share of the pruned columns, so one launch is the whole call; a K split adds
// partial sums into the fp32 workspace for the finalize pass. The column indices and biases of that tail are
// requested before and right after the main loop (at M = 1 and 90% sparsity, 8% of the call).
constexpr int kGemvSliceCols = 32;
constexpr int kGemvThreads = 256;
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
  static constexpr int kOutputs = (MaxM * kGemvSliceCols + kGemvThreads - 1) / kGemvThreads;  // per thread
  using Vec = std::conditional_t<kCols == 8, uint4, uint2>;
  static_assert(kGemvThreads / 32 * MaxM * kGemvSliceCols <= kGemvStageFloats, "the reduction reuses the staging");
};

template <typename T, int MaxM>
__global__ void __launch_bounds__(kGemvThreads) tw_gemv_kernel(PackedTile w, Problem p, int k_split) {
  using Shape = GemvShape<MaxM>;
  using Vec = typename Shape::Vec;
  allow_dependent_launch();  // a finalize pass may follow
  constexpr int kCols = Shape::kCols, kLanesN = Shape::kLanesN, kRowSlots = Shape::kRowSlots;
  constexpr int kUnroll = Shape::kUnroll, kWarps = kGemvThreads / 32;
  __shared__ __align__(16) float s_x[kGemvStageFloats];
  const int slices = w.granularity / kGemvSliceCols;
  const int tile = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int p0 = w.tile_ptr[tile], kt = w.tile_ptr[tile + 1] - p0;
  const int kb = min(kt, static_cast<int>(blockIdx.y) * k_split), ke = min(kt, kb + k_split);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_n = lane % kLanesN, slot = tid / kLanesN;
  const int c0 = slice * kGemvSliceCols + lane_n * kCols;  // the lane's first column inside the tile

  const T* x = static_cast<const T*>(p.x);
  const T* vals = static_cast<const T*>(w.values) + static_cast<int64_t>(p0) * w.granularity + c0;
  const int M = static_cast<int>(p.M);
  float acc[MaxM][kCols];
#pragma unroll
  for (int m = 0; m < MaxM; ++m)
#pragma unroll
    for (int e = 0; e < kCols; ++e) acc[m][e] = 0.0f;

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
  // The columns this thread finishes after the main loop, its slice's and its share of the pruned ones, are
  // requested now and their biases right after the loop: left to the end, each output waited for a column index
  // and then for its bias, one dependent load after another behind all of the CTA's work.
  const bool split = gridDim.y > 1;
  const int slice_pos = tile * w.granularity + slice * kGemvSliceCols;  // the slice's first position in w.cols
  int out_col[Shape::kOutputs];
#pragma unroll
  for (int o = 0; o < Shape::kOutputs; ++o) {
    const int t = tid + o * kGemvThreads;
    out_col[o] = t < M * kGemvSliceCols ? w.cols[slice_pos + t % kGemvSliceCols] : -1;
  }
  FinalizeCursor<T> fill(w, p, false, static_cast<int64_t>(blockIdx.x) * kGemvThreads + tid,
                         split ? 0 : static_cast<int64_t>(gridDim.x) * kGemvThreads);
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
        const float* xs = s_x + (row - k0) * MaxM;
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
        const T* wv = reinterpret_cast<const T*>(&v[u]);
#pragma unroll
        for (int e = 0; e < kCols; ++e) {
          const float we = to_float(wv[e]);
#pragma unroll
          for (int m = 0; m < MaxM; ++m) acc[m][e] += xv[m] * we;
        }
      }
      if (k + kRowSlots * kUnroll < k1) load_batch(k + kRowSlots * kUnroll, k1);
    }
  }

  float out_bias[Shape::kOutputs];
#pragma unroll
  for (int o = 0; o < Shape::kOutputs; ++o) out_bias[o] = out_col[o] >= 0 ? column_bias<T>(p, out_col[o]) : 0.0f;
  fill.fetch_bias(p);

  // Lanes with the same lane_n hold sums for the same columns: fold the warp's row lanes, then the warps.
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
#pragma unroll
  for (int o = 0; o < Shape::kOutputs; ++o) {
    const int t = tid + o * kGemvThreads;
    if (out_col[o] < 0) continue;  // past M * kGemvSliceCols, or padding of the last tile
    const int m = t / kGemvSliceCols, c = t % kGemvSliceCols;
    float s[1] = {0.0f};
#pragma unroll
    for (int i = 0; i < kWarps; ++i) s[0] += s_x[(i * MaxM + m) * kGemvSliceCols + c];
    if (split) {
      atomicAdd(p.workspace + ws_index(w, p, m, slice_pos + c), s[0]);
    } else {
      finish_output<T>(s, out_col[o], out_bias[o], m, w, p);
    }
  }
  while (!fill.done()) fill.step(w, p);
}

// Epilogue for the columns no tensor-core CTA wrote: every column after a split-K pass (all_columns), else
// only the pruned ones (see finalize_share).
template <typename T>
__global__ void tw_finalize_kernel(PackedTile w, Problem p, bool all_columns) {
  wait_for_prerequisite_grid();  // launched as a dependent of the GEMM kernel, whose sums it reads
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (all_columns) {
    finalize_share<T>(w, p, true, thread, threads);
  } else {
    fill_pruned_share<T>(w, p, thread, threads);
  }
}

// out[c*ld_out + r] = in[r*ld_in + c] for r < R, c < C, through kTransposeRows x kTransposeCols tiles in shared
// memory: 16-byte loads along C and 16-byte stores along R (`vec`: both leading dimensions multiples of 8 and both
// pointers 16-byte aligned), else element by element at the edges. Each thread issues all of its loads before it
// writes any of them to the tile: 64 x 128 tiles (four loads in flight per thread) moved the row-major TW path's
// transposes 3-8% faster than 64 x 64 ones, while 64 x 256, 128 x 128 and 32 x 128 were slower
// (bench/results/tw_h200_transpose.md). The tile rows are padded by one word, so that both phases stay (nearly)
// conflict-free.
constexpr int kTransposeRows = 64, kTransposeCols = 128, kTransposeThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t R, int64_t C, int64_t ld_in,
                     int64_t ld_out, bool vec) {
  constexpr int kRows = kTransposeRows, kCols = kTransposeCols, kThreads = kTransposeThreads;
  constexpr int kLoads = kRows * (kCols / 8) / kThreads, kStores = kCols * (kRows / 8) / kThreads;
  __shared__ T tile[kRows][kCols + 2];
  allow_dependent_launch();      // the GEMM that reads a transposed x
  wait_for_prerequisite_grid();  // the GEMM whose output this transposes back
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows, c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  alignas(16) T v[kLoads][8];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = threadIdx.x + k * kThreads;
    const int r = i / (kCols / 8), chunk = i % (kCols / 8);
    const int64_t gr = r0 + r, gc = c0 + chunk * 8;
    if (vec && gr < R && gc + 8 <= C) {
      *reinterpret_cast<uint4*>(v[k]) = *reinterpret_cast<const uint4*>(in + gr * ld_in + gc);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[k][e] = gr < R && gc + e < C ? in[gr * ld_in + gc + e] : from_float<T>(0.0f);
    }
  }
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = threadIdx.x + k * kThreads;
    const int r = i / (kCols / 8), chunk = i % (kCols / 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) tile[r][chunk * 8 + e] = v[k][e];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kStores; ++k) {
    const int i = threadIdx.x + k * kThreads;
    const int c = i / (kRows / 8), chunk = i % (kRows / 8);
    const int64_t gc = c0 + c, gr = r0 + chunk * 8;
    if (gc >= C) continue;
    alignas(16) T o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = tile[chunk * 8 + e][c];
    T* dst = out + gc * ld_out + gr;
    if (vec && gr + 8 <= R) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(o);
    } else {
      for (int e = 0; e < 8 && gr + e < R; ++e) dst[e] = o[e];
    }
  }
}

template <typename T, typename Cfg>
const char* run_mma(const PackedTile& w, const Problem& p, int splits) {
  return launch_tiles<Cfg, tw_mma_kernel<T, Cfg>>(w, p, splits);
}

// CTA tiles per G: 128x128 (warp 64x32) for G=128; 256xG for the narrower tiles so a CTA still does enough work.
using Cfg128 = MmaConfig<128, 128, 2, 4, 4>;
using Cfg64 = MmaConfig<256, 64, 4, 2, 4>;
using Cfg32 = MmaConfig<256, 32, 8, 1, 4>;
// Small M (kGemvMaxM < M <= kSmallM): one 16-row block and a deep pipeline, since the kernel is bound by the packed
// values' bytes and each CTA streams only a few kilobytes per stage; a warp per 16 columns (G / 16 warps): with
// fewer, one warp per scheduler issued the loop's address arithmetic and copies at a few cycles per instruction.
constexpr int kSmallMBlock = 16, kSmallMSplitRows = 256;
using Cfg128Small = MmaConfig<kSmallMBlock, 128, 1, 8, 8, kSmallMSplitRows>;
using Cfg64Small = MmaConfig<kSmallMBlock, 64, 1, 4, 8, kSmallMSplitRows>;
using Cfg32Small = MmaConfig<kSmallMBlock, 32, 1, 2, 8, kSmallMSplitRows>;

int block_m(int G) { return G == 128 ? Cfg128::kBM : (G == 64 ? Cfg64::kBM : Cfg32::kBM); }

template <typename T>
const char* dispatch_mma(const PackedTile& w, const Problem& p, const Plan& plan) {
  if (plan.block_m == kSmallMBlock) {
    switch (w.granularity) {
      case 128: return run_mma<T, Cfg128Small>(w, p, plan.splits);
      case 64: return run_mma<T, Cfg64Small>(w, p, plan.splits);
      default: return run_mma<T, Cfg32Small>(w, p, plan.splits);
    }
  }
  switch (w.granularity) {
    case 128: return run_mma<T, Cfg128>(w, p, plan.splits);
    case 64: return run_mma<T, Cfg64>(w, p, plan.splits);
    case 32: return run_mma<T, Cfg32>(w, p, plan.splits);
    default: return "granularity must be 32, 64 or 128";
  }
}

// K splits of the GEMV: none unless its CTAs would fill less than half the GPU, then enough for about two CTAs
// per SM, each with at least 256 kept rows.
int gemv_splits(const PackedTile& w, const Problem& p) {
  const int64_t ctas = static_cast<int64_t>(w.num_tiles) * (w.granularity / kGemvSliceCols);
  if (2 * ctas >= p.num_sms) return 1;
  return static_cast<int>(std::min<int64_t>(cdiv(2 * p.num_sms, ctas), std::max(1, w.max_tile_k / 256)));
}

template <typename T, int MaxM>
const char* run_gemv(const PackedTile& w, const Problem& p, int splits) {
  const int k_split = cdiv(cdiv(w.max_tile_k, splits), kKStep) * kKStep;
  const dim3 grid(w.num_tiles * (w.granularity / kGemvSliceCols), splits);
  tw_gemv_kernel<T, MaxM><<<grid, kGemvThreads, 0, p.stream>>>(w, p, std::max(k_split, kKStep));
  return check_launch();
}

template <typename T>
const char* dispatch_gemv(const PackedTile& w, const Problem& p, int splits) {
  if (p.M <= 1) return run_gemv<T, 1>(w, p, splits);
  if (p.M <= 2) return run_gemv<T, 2>(w, p, splits);
  if (p.M <= 4) return run_gemv<T, 4>(w, p, splits);
  if (p.M <= 8) return run_gemv<T, 8>(w, p, splits);
  return run_gemv<T, 16>(w, p, splits);
}

template <typename T>
const char* run_finalize(const PackedTile& w, const Problem& p, bool all_columns) {
  const int64_t outputs = finalize_outputs(w, p, all_columns);
  if (outputs == 0) return nullptr;
  // About 8 CTAs per SM, each looping over many outputs: one output per thread made ~10^5 tiny CTAs whose
  // scheduling, not the stores, set the time.
  const int64_t grid = std::min<int64_t>(cdiv(outputs, 256), 8LL * p.num_sms);
  return launch_kernel(tw_finalize_kernel<T>, dim3(static_cast<unsigned>(grid)), dim3(256), 0, p.stream, true, w, p,
                       all_columns);
}

// Kept K from which a tile's items are long enough for the cooperative 256-row configuration.
constexpr int kLongItemK = 1024;
// M from which the warp-specialized kernel never splits K (see make_plan).
constexpr int64_t kWsSplitMaxM = 1024;

// Rows per item of the Hopper kernels, from measurements on an H200 (bench/results/tw_h200_row_blocks.md and
// tw_h200_192_row_items.md). 256-row items halve the packed-value traffic per MMA, but their two warpgroups finish
// together, so nothing hides their epilogue: with G = 128 they pay only with two items per SM and long items; with
// G = 64, whose 128-row items are short of operand reuse, from one item per SM, or from three per four SMs with 32
// K steps per item. Where 128-row items would leave over half the SMs idle, the warp-specialized kernel takes
// 64-row items instead: at M >= 1024 a round of them, below twice the items to split K over (LSTM gates, M = 128).
int wgmma_block_m(const PackedTile& w, const Problem& p, Path path) {
  const auto items = [&](int bm) { return static_cast<int64_t>(w.num_tiles) * cdiv(p.M, bm); };
  const bool ws = path == Path::kWgmmaWs, ws_unsplit = ws && p.M >= kWsSplitMaxM;
  if (ws && 2 * items(128) <= p.num_sms) return 64;
  if (items(256) >= 2LL * p.num_sms && w.max_tile_k >= kLongItemK) return 256;
  const int64_t mean_k = w.value_rows / w.num_tiles;
  if (ws_unsplit && w.granularity == 64) {
    if (items(256) >= p.num_sms || (4 * items(256) >= 3LL * p.num_sms && mean_k >= 2 * kLongItemK)) return 256;
  }
  // Cooperative 192-row items where they take fewer rows per SM than rounds of 128-row ones, counted 10% dearer
  // (their epilogue is not hidden), and where tiles keep about as many rows each (vector-wise N:M: BERT FFN out at
  // 2:8 runs as one round of 132 items of 192 rows instead of 192 items of 128 on 132 SMs). With uneven tiles the
  // heaviest-first schedule already pairs heavy 128-row items with light ones, and 192 rows lost there.
  const auto rows_per_sm = [&](int bm) { return cdiv(items(bm), p.num_sms) * static_cast<int64_t>(bm); };
  const bool even_tiles = 20LL * w.max_tile_k <= 23 * mean_k;
  if (ws_unsplit && even_tiles && 11 * rows_per_sm(192) < 10 * rows_per_sm(128)) return 192;
  return 128;
}

int splits_for(const PackedTile& w, const Problem& p, int bm) {
  // Small M: pieces of kSmallMSplitRows kept rows each (the kernel's own rule), enough for the heaviest tile.
  if (bm == kSmallMBlock) return std::max(1, cdiv(w.max_tile_k, kSmallMSplitRows));
  // Otherwise split K only when the CTAs would fill less than half the GPU: a second wave costs as much as the
  // atomics and the finalize pass that splitting adds.
  const int64_t ctas = static_cast<int64_t>(w.num_tiles) * cdiv(p.M, bm);
  if (2 * ctas > p.num_sms) return 1;
  const int max_splits = std::max(1, w.max_tile_k / (2 * kKStep));  // at least 2 K steps per split
  return static_cast<int>(std::min<int64_t>(max_splits, p.num_sms / ctas));
}

template <typename T>
const char* run(const PackedTile& w, const Problem& p) {
  if (p.M == 0) return nullptr;
  if (w.num_tiles == 0) return run_finalize<T>(w, p, false);  // every column pruned: bias (+ residual) only
  const Plan plan = make_plan(w, p);
  const char* e = nullptr;
  switch (plan.path) {
    case Path::kGemv:
      e = dispatch_gemv<T>(w, p, plan.splits);
      break;
    case Path::kWgmma:
      e = launch_wgmma(w, p, plan);
      break;
    case Path::kWgmmaWs:
      e = launch_wgmma_ws(w, p, plan);
      break;
    case Path::kMmaSync:
      e = dispatch_mma<T>(w, p, plan);
      break;
    default:
      return "the requested TW kernel path is unavailable (wgmma needs an sm_90a build, a Hopper GPU and G 64/128)";
  }
  if (e != nullptr) return e;
  if (plan.splits > 1) return run_finalize<T>(w, p, true);
  // Without a K split the GEMV and the mma.sync kernel finish every column themselves, and the warp-specialized
  // kernel a feature-major y's.
  if (plan.path == Path::kGemv || plan.path == Path::kMmaSync) return nullptr;
  if (plan.path == Path::kWgmmaWs && fills_pruned_columns(p, 1)) return nullptr;
  return run_finalize<T>(w, p, false);
}

}  // namespace

Plan make_plan(const PackedTile& w, const Problem& p) {
  Plan plan{};
  if (p.M <= kSmallM) {
    // Above kGemvMaxM rows the GEMV's FMAs, not the weight bytes, would set its time: tensor cores take over where
    // x is feature-major with 16-byte rows (the binding transposes a row-major x into that form).
    const bool x_rows16 = p.sxm == 1 && p.sxk % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    if (p.M > kGemvMaxM && x_rows16) {
      plan.path = Path::kMmaSync;
      plan.block_m = kSmallMBlock;
      plan.splits = splits_for(w, p, plan.block_m);
    } else {
      plan.path = Path::kGemv;
      plan.splits = gemv_splits(w, p);
    }
    return plan;
  }
  const bool hopper_ok = (w.granularity == 64 || w.granularity == 128) && wgmma_available();
  const Path wanted = p.path == Path::kAuto ? (hopper_ok ? Path::kWgmmaWs : Path::kMmaSync) : p.path;
  const bool wants_wgmma = wanted == Path::kWgmma || wanted == Path::kWgmmaWs;
  if (wants_wgmma && !hopper_ok) {
    plan.path = Path::kUnavailable;
    return plan;
  }
  plan.path = wants_wgmma ? wanted : Path::kMmaSync;
  if (wants_wgmma) {
    plan.block_m = wgmma_block_m(w, p, plan.path);
  } else {
    plan.block_m = block_m(w.granularity);
  }
  // The warp-specialized kernel splits K only for short columns. At M = 4096 (BERT FFN out at 90%: 64 items) the
  // workspace, atomics and finalize pass cost more than the idle SMs save (17.6 against 13.3 us on an H200); at
  // M = 128 (LSTM gates) the finalize pass's full grid writes the many short pruned columns faster than the
  // kernel's fill (with bias and GELU: 10 against 14 us).
  const bool may_split = plan.path != Path::kWgmmaWs || p.M < kWsSplitMaxM;
  plan.splits = may_split ? splits_for(w, p, plan.block_m) : 1;
  return plan;
}

bool needs_workspace(const PackedTile& w, const Problem& p) {
  if (w.num_tiles == 0) return false;
  return make_plan(w, p).splits > 1;
}

const char* launch_tw_matmul(const PackedTile& w, const Problem& p) {
  return p.dtype == DType::kHalf ? run<__half>(w, p) : run<__nv_bfloat16>(w, p);
}

const char* launch_transpose(const void* in, void* out, int64_t R, int64_t C, int64_t ld_in, int64_t ld_out,
                             DType dtype, cudaStream_t stream, bool after_gemm) {
  if (R == 0 || C == 0) return nullptr;
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool vec = ld_in % 8 == 0 && ld_out % 8 == 0 && aligned(in) && aligned(out);
  const dim3 grid(cdiv(C, kTransposeCols), cdiv(R, kTransposeRows));
  const auto launch = [&](auto* typed) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
    return launch_kernel(transpose_kernel<T>, grid, dim3(kTransposeThreads), 0, stream, after_gemm,
                         static_cast<const T*>(in), static_cast<T*>(out), R, C, ld_in, ld_out, vec);
  };
  return dtype == DType::kHalf ? launch(static_cast<__half*>(nullptr)) : launch(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace tw
}  // namespace sparseprune
