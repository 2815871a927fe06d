// General N:M sparse GEMM on CUDA cores: element-wise N:M, and vector-wise N:M whose vectors are too narrow for the
// tensor-core (TW) route. Both kernels lean on the balanced layout: a values row holds one kept entry per column,
// all from one group of m consecutive K, so threads that walk rows together read x inside a window of a few groups.
// x is staged in shared memory as fp32, [row of x][k], so that window spans at most 32 consecutive words and the
// reads are conflict-free for the common configurations (equal addresses broadcast).
//
// Small M (<= kSmallM, memory bound): a CTA owns 32 columns (one panel of an element-wise packing, which it reads as
// one contiguous block) and a range of K groups; each lane streams 16-byte value vectors (8 columns) and their 8
// in-group positions per row, so every kept weight is read once, coalesced. Few
// column blocks split K over CTAs that write fp32 slices, summed in order by a finalize pass (deterministic).
// Large M: a CTA owns a 64 x 64 output tile; a thread owns one column and 16 rows, reads one weight and one index
// per kept row and does 16 FMAs against the staged x tile (fp32 accumulation).
#include <algorithm>
#include <type_traits>

#include "nm_device.cuh"

namespace sparseprune {
namespace nm {
namespace {

using tw::check_launch;
using tw::to_float;

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// SpMV tiling.
constexpr int kColsPerLane = 8;                       // one 16-byte load of values per row
constexpr int kLanesN = 4;                            // lanes of a warp along N
constexpr int kGemvBN = kLanesN * kColsPerLane;       // 32 columns per CTA: 64-byte row segments
constexpr int kRowsPerWarp = 32 / kLanesN;            // consecutive values rows a warp reads at once
constexpr int kRowSlots = kWarps * kRowsPerWarp;      // rows a CTA reads at once
constexpr int kUnroll = 4;                            // row loads in flight per thread
constexpr int kStageFloats = 8192;                    // 32 KB of staged x per chunk
constexpr int64_t kMinRowsPerSplit = 512;

// SpMM tiling.
constexpr int kMmBM = 64, kMmBN = 64;
constexpr int kMmRows = kMmBM / (kThreads / kMmBN);  // rows of x per thread
constexpr int kMmChunkK = 128;                        // dense K staged per step (a multiple of every m)

static_assert(kGemvBN == kPanel, "a SpMV CTA reads one panel of an element-wise packing");
static_assert(kStageFloats % (16 * 32) == 0, "every staged chunk must hold whole groups of m <= 32");
static_assert(kWarps * 16 * kGemvBN <= kStageFloats, "the SpMV reduction reuses the staging buffer");

// Where a lane's 8 columns from n0 sit in packed row r: at base + r * stride among the values (and, for element-wise
// packings, scaled by idx_bits / 8 among the positions). One panel's row for element-wise packings, a row of N
// values for vector-wise ones.
struct LaneColumns {
  int64_t base;
  int64_t stride;
};

__device__ __forceinline__ LaneColumns lane_columns(const PackedNMView& w, int64_t n0) {
  const int64_t at0 = packed_offset(w, 0, n0);
  return {at0, packed_offset(w, 1, n0) - at0};
}

// The same from a chunk's first packed row row0, with the rows counted from it: values at vals[r * stride],
// element-wise positions at idx[r * stride * idx_bits / 8].
template <typename T, typename Offset>
struct LaneRows {
  const T* vals;
  const uint8_t* idx;
  Offset stride;
};

template <typename T, Positions P, typename Offset>
__device__ __forceinline__ LaneRows<T, Offset> lane_rows(const PackedNMView& w, const LaneColumns& lc, int64_t row0) {
  const int64_t first = lc.base + row0 * lc.stride;  // even for 4-bit positions: panels and lanes start so
  return {static_cast<const T*>(w.values) + first, w.idx + (P == Positions::kNibbles ? first / 2 : first),
          static_cast<Offset>(lc.stride)};
}

// The 8 in-group positions of columns n0..n0+7 in packed row `row`, unmasked: one 4-byte word of nibbles (in .x) or
// 8 bytes. `at` points at them in an element-wise packing; a vector-wise one gathers them from its rows of N / vector.
template <Positions P>
__device__ __forceinline__ uint2 load_positions(const PackedNMView& w, const uint8_t* at, int64_t row, int64_t n0) {
  if constexpr (P == Positions::kNibbles) {
    return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(at)), 0u);
  } else if constexpr (P == Positions::kBytes) {
    return __ldg(reinterpret_cast<const uint2*>(at));
  } else {
    const uint8_t* r = w.idx + row * (w.N / w.vector);
    uint32_t word[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < kColsPerLane; ++e) {
      word[e / 4] |= static_cast<uint32_t>(__ldg(r + (n0 + e) / w.vector)) << (8 * (e % 4));
    }
    return make_uint2(word[0], word[1]);
  }
}

// kUnroll values rows of one lane (16-byte value vectors and their 8 in-group positions), loaded together so
// their DRAM latencies overlap.
struct RowBatch {
  uint4 values[kUnroll];
  uint2 positions[kUnroll];
};

// Loads a chunk's packed rows l, l + kRowSlots, ... (kUnroll of them, those below `rows`; rows counted from the
// chunk's first) through load(row, values, positions).
template <typename Load>
__device__ __forceinline__ void load_rows(RowBatch& batch, int l, int rows, const Load& load) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int lu = l + u * kRowSlots;
    batch.values[u] = make_uint4(0u, 0u, 0u, 0u);
    batch.positions[u] = make_uint2(0u, 0u);
    if (lu < rows) load(lu, batch.values[u], batch.positions[u]);
  }
}

// SpMV: CTA = (32 columns, range of groups). Warp lanes: 4 along N (8 columns each) x 8 consecutive values rows.
// Each chunk's first rows are requested before x is staged, so the staging hides under their DRAM latency.
// CTAs per SM the register budget must allow: the decode GEMV launches ~2.6 CTAs per SM (344 panels on 132 SMs),
// and with only 2 fitting the last ones ran as a second wave (M = 1 uncapped, 94 registers; M = 3 and 4, where two
// waves took 2.3 times the time of M = 2). Three fit the element-wise kernel up to 4 rows of x (without spills for
// 4-bit positions); the vector-wise one's position gathers need more registers.
constexpr int gemv_min_blocks(int max_m, Positions positions) {
  if (max_m > 4) return 1;
  return positions != Positions::kVectorBytes ? 3 : 2;
}

// Stages x[row][k0, k0 + len) as fp32 into s_x[row][0, len) for rows < M, as 16-byte loads where x allows: its
// element-wise loads (64 per thread at M = 16, K = 4096) left several batches of them in turn on every CTA's path to
// its first multiply.
template <typename T, int ChunkK>
__device__ __forceinline__ void stage_x_chunk(float* s_x, const T* x, int64_t ldx, int64_t k0, int M, int len) {
  const int tid = threadIdx.x;
  if (ldx % 8 == 0 && k0 % 8 == 0 && len % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int row_vecs = len / 8;
#pragma unroll 2
    for (int i = tid; i < M * row_vecs; i += kThreads) {
      const int row = i / row_vecs, kk = (i - row * row_vecs) * 8;
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(x + row * ldx + k0 + kk));
      const T* h = reinterpret_cast<const T*>(&q);
      float4* dst = reinterpret_cast<float4*>(s_x + row * ChunkK + kk);
      dst[0] = make_float4(to_float(h[0]), to_float(h[1]), to_float(h[2]), to_float(h[3]));
      dst[1] = make_float4(to_float(h[4]), to_float(h[5]), to_float(h[6]), to_float(h[7]));
    }
    return;
  }
  for (int i = tid; i < M * len; i += kThreads) {
    const int row = i / len, kk = i - row * len;
    s_x[row * ChunkK + kk] = to_float(x[row * ldx + k0 + kk]);
  }
}

template <typename T, int MaxM, Positions P>
__global__ void __launch_bounds__(kThreads, gemv_min_blocks(MaxM, P)) nm_gemv_kernel(PackedNMView w, Problem p, int64_t groups_per_split) {
  constexpr int kChunkK = kStageFloats / MaxM;
  __shared__ __align__(16) float s_x[kStageFloats];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_n = lane % kLanesN, slot = warp * kRowsPerWarp + lane / kLanesN;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kGemvBN + lane_n * kColsPerLane;
  const bool col_ok = n0 < w.N;  // N % 8 == 0: a lane's 8 columns are all in range or all out
  const LaneColumns lc = lane_columns(w, col_ok ? n0 : 0);
  const int M = static_cast<int>(p.M), m = w.m, kept = w.kept;
  const int64_t groups = w.K / m;
  const int64_t g_begin = min(groups, static_cast<int64_t>(blockIdx.y) * groups_per_split);
  const int64_t g_end = min(groups, g_begin + groups_per_split);
  const int64_t chunk_groups = kChunkK / m;
  const T* x = static_cast<const T*>(p.x);

  float acc[MaxM][kColsPerLane];
#pragma unroll
  for (int i = 0; i < MaxM; ++i)
#pragma unroll
    for (int e = 0; e < kColsPerLane; ++e) acc[i][e] = 0.0f;

  const Divisor by_kept(kept);
  const uint32_t mask4 = 4u * static_cast<uint32_t>(m - 1) * 0x01010101u;
  for (int64_t g0 = g_begin; g0 < g_end; g0 += chunk_groups) {
    const int64_t g1 = min(g_end, g0 + chunk_groups);
    const int len = static_cast<int>((g1 - g0) * m);
    const int64_t k0 = g0 * m, row0 = g0 * kept;
    const int rows = static_cast<int>((g1 - g0) * kept);
    // Reads packed row row0 + r of the lane's columns. Up to two rows of x, from pointers to the chunk's first row
    // (in 32 bits at one row: a panel's chunk spans fewer than 2^31 values): one multiply-add per row instead of
    // 64-bit products and a signed halving took six element-wise patterns on the decode weight 3-9% faster at one
    // row and moved two rows by -2% to +4% (bench/results/nm_h200_lane_rows.md). From three rows, where the registers
    // are short (80 a thread for three CTAs per SM), 64-bit offsets from the lane's first packed row: the pointers ran
    // three and four rows 4-5% slower.
    const auto load = [&](int r, uint4& values, uint2& positions) {
      if constexpr (MaxM <= 2) {
        using Offset = std::conditional_t<MaxM == 1 && P != Positions::kVectorBytes, int, int64_t>;
        const LaneRows<T, Offset> lr = lane_rows<T, P, Offset>(w, lc, row0);
        const Offset at = static_cast<Offset>(r) * lr.stride;  // >= 0
        values = __ldg(reinterpret_cast<const uint4*>(lr.vals + at));
        positions = load_positions<P>(w, lr.idx + (P == Positions::kNibbles ? at >> 1 : at), row0 + r, n0);
      } else {
        const int64_t at = lc.base + row0 * lc.stride + static_cast<int64_t>(r) * lc.stride;
        values = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(w.values) + at));
        positions = load_positions<P>(w, w.idx + (P == Positions::kNibbles ? at / 2 : at), row0 + r, n0);
      }
    };
    RowBatch batch;
    if (col_ok) load_rows(batch, slot, rows, load);
    if (g0 != g_begin) __syncthreads();  // the previous chunk is fully read
    stage_x_chunk<T, kChunkK>(s_x, x, p.ldx, k0, M, len);
    __syncthreads();
    if (!col_ok) continue;
    for (int l = slot; l < rows; l += kRowSlots * kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int lu = l + u * kRowSlots;
        if (lu >= rows) break;
        const char* group = reinterpret_cast<const char*>(s_x + by_kept(lu) * m);
        const GroupOffsets<P> at(batch.positions[u], mask4);
        const T* wv = reinterpret_cast<const T*>(&batch.values[u]);
#pragma unroll
        for (int e = 0; e < kColsPerLane; ++e) {
          const float we = to_float(wv[e]);
          const float* xs = reinterpret_cast<const float*>(group + at(e));
#pragma unroll
          for (int i = 0; i < MaxM; ++i) {
            if (i >= M) break;
            acc[i][e] += xs[i * kChunkK] * we;
          }
        }
      }
      if (l + kRowSlots * kUnroll < rows) load_rows(batch, l + kRowSlots * kUnroll, rows, load);
    }
  }

  // Lanes with the same lane_n hold sums for the same columns: fold the warp's 8 row lanes, then the 8 warps.
#pragma unroll
  for (int i = 0; i < MaxM; ++i)
#pragma unroll
    for (int e = 0; e < kColsPerLane; ++e) {
      float s = acc[i][e];
      for (int off = kLanesN; off < 32; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      acc[i][e] = s;
    }
  __syncthreads();  // s_x is reused for the partial sums
  float* s_part = s_x;  // [kWarps][MaxM][kGemvBN]
  if (lane < kLanesN) {
#pragma unroll
    for (int i = 0; i < MaxM; ++i) {
      if (i >= M) break;
#pragma unroll
      for (int e = 0; e < kColsPerLane; ++e) s_part[(warp * MaxM + i) * kGemvBN + lane * kColsPerLane + e] = acc[i][e];
    }
  }
  __syncthreads();
  finish_column_block<T, kGemvBN, kWarps>(s_part, MaxM, static_cast<int64_t>(blockIdx.x) * kGemvBN, w, p);
}

// Sums the K splits' fp32 slices in split order, then bias and activation.
template <typename T>
__global__ void nm_finalize_kernel(PackedNMView w, Problem p, int splits) {
  const int64_t total = p.M * w.N;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int sp = 0; sp < splits; ++sp) s += p.workspace[sp * total + i];
    store_output<T>(p, i / w.N, i % w.N, s);
  }
}

// SpMM: CTA = 64 rows of x x 64 columns; thread = one column x 16 rows. A warp's 32 lanes read the same values
// row, hence the same group of x: conflict-free shared-memory reads.
template <typename T>
__global__ void __launch_bounds__(kThreads) nm_spmm_kernel(PackedNMView w, Problem p) {
  __shared__ float s_x[kMmBM * kMmChunkK];  // [row of x][k], fp32
  const int tid = threadIdx.x, c = tid % kMmBN, rg = tid / kMmBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kMmBM;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kMmBN + c;
  const bool col_ok = col < w.N;
  const int m = w.m, kept = w.kept;
  const T* x = static_cast<const T*>(p.x);
  const T* vals = static_cast<const T*>(w.values);

  float acc[kMmRows];
#pragma unroll
  for (int i = 0; i < kMmRows; ++i) acc[i] = 0.0f;

  for (int64_t k0 = 0; k0 < w.K; k0 += kMmChunkK) {
    const int len = static_cast<int>(w.K - k0 < kMmChunkK ? w.K - k0 : kMmChunkK);  // a multiple of m: K % m == 0
    __syncthreads();
    for (int i = tid; i < kMmBM * kMmChunkK; i += kThreads) {
      const int r = i / kMmChunkK, kk = i % kMmChunkK;
      const int64_t row = m0 + r;
      s_x[i] = (row < p.M && kk < len) ? to_float(x[row * p.ldx + k0 + kk]) : 0.0f;
    }
    __syncthreads();
    if (!col_ok) continue;
    const int64_t r_begin = k0 / m * kept, r_end = (k0 + len) / m * kept;
    const float* xs_rows = s_x + rg * kMmRows * kMmChunkK;
#pragma unroll 4
    for (int64_t r = r_begin; r < r_end; ++r) {
      const float wv = to_float(vals[packed_offset(w, r, col)]);
      const int pos = position_at(w, r, col);
      const float* xs = xs_rows + static_cast<int>((r / kept) * m - k0) + pos;
#pragma unroll
      for (int i = 0; i < kMmRows; ++i) acc[i] += xs[i * kMmChunkK] * wv;
    }
  }
  if (!col_ok) return;
#pragma unroll
  for (int i = 0; i < kMmRows; ++i) {
    const int64_t row = m0 + rg * kMmRows + i;
    if (row < p.M) store_output<T>(p, row, col, acc[i]);
  }
}

// K splits of the SpMV: only when the column blocks leave most SMs idle, and never below kMinRowsPerSplit rows.
int gemv_splits(const PackedNMView& w, const Problem& p) {
  const int64_t col_blocks = cdiv(w.N, kGemvBN);
  if (2 * col_blocks >= p.num_sms) return 1;
  const int64_t rows = w.K / w.m * w.kept;
  const int64_t by_rows = std::max<int64_t>(1, rows / kMinRowsPerSplit);
  const int64_t by_sms = cdiv(2LL * p.num_sms, std::max<int64_t>(1, col_blocks));
  return static_cast<int>(std::min<int64_t>({by_rows, by_sms, 32}));
}

template <typename T, int MaxM>
const char* run_gemv(const PackedNMView& w, const Problem& p, int splits) {
  if (splits > 1 && p.workspace == nullptr) return "the split-K N:M SpMV needs its fp32 workspace";
  const char* err = nullptr;
  if (p.M >= kGemvMmaMinM && gemv_mma_supported(w, p)) {
    err = launch_gemv_mma(w, p, splits);
  } else {
    const int64_t groups = w.K / w.m;
    const int64_t groups_per_split = std::max<int64_t>(1, cdiv(groups, splits));
    const dim3 grid(static_cast<unsigned>(cdiv(w.N, kGemvBN)), static_cast<unsigned>(splits));
    if (w.vector != 1) {
      nm_gemv_kernel<T, MaxM, Positions::kVectorBytes><<<grid, kThreads, 0, p.stream>>>(w, p, groups_per_split);
    } else if (w.idx_bits == 4) {
      nm_gemv_kernel<T, MaxM, Positions::kNibbles><<<grid, kThreads, 0, p.stream>>>(w, p, groups_per_split);
    } else {
      nm_gemv_kernel<T, MaxM, Positions::kBytes><<<grid, kThreads, 0, p.stream>>>(w, p, groups_per_split);
    }
    err = check_launch();
  }
  if (err != nullptr || splits == 1) return err;
  const int64_t blocks = std::min<int64_t>(cdiv(p.M * w.N, kThreads), 8LL * p.num_sms);
  nm_finalize_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, p.stream>>>(w, p, splits);
  return check_launch();
}

template <typename T>
const char* run_spmm(const PackedNMView& w, const Problem& p) {
  const int64_t row_blocks = cdiv(p.M, kMmBM), col_blocks = cdiv(w.N, kMmBN);
  if (col_blocks > 65535 || row_blocks > 0x7fffffff) return "N:M SpMM grid too large (N over 4M columns)";
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks));
  nm_spmm_kernel<T><<<grid, kThreads, 0, p.stream>>>(w, p);
  return check_launch();
}

template <typename T>
const char* run(const PackedNMView& w, const Problem& p) {
  if (p.M == 0 || w.N == 0) return nullptr;
  if (p.M > kSmallM) return run_spmm<T>(w, p);
  const int splits = gemv_splits(w, p);
  if (p.M <= 1) return run_gemv<T, 1>(w, p, splits);
  if (p.M <= 2) return run_gemv<T, 2>(w, p, splits);
  if (p.M <= 4) return run_gemv<T, 4>(w, p, splits);
  if (p.M <= 8) return run_gemv<T, 8>(w, p, splits);
  return run_gemv<T, 16>(w, p, splits);
}

}  // namespace

int64_t workspace_floats(const PackedNMView& w, const Problem& p) {
  if (p.M == 0 || p.M > kSmallM || w.N == 0) return 0;
  const int splits = gemv_splits(w, p);
  return splits > 1 ? splits * p.M * w.N : 0;
}

const char* launch_nm_matmul(const PackedNMView& w, const Problem& p) {
  return p.dtype == DType::kHalf ? run<__half>(w, p) : run<__nv_bfloat16>(w, p);
}

}  // namespace nm
}  // namespace sparseprune
