// Tile-wise (TW/TEW) sparse GEMM: host planning, the mma.sync path (m16n8k16, sm_80+) and the finalize pass. The
// small-M GEMVs live in tw_gemv.cu, the Hopper wgmma paths in tw_gemm_sm90.cu (every thread loads and multiplies)
// and tw_gemm_sm90_ws.cu (warp-specialized and persistent, the default on Hopper).
//
// Every tile is a dense GEMM over its own kept K rows, so one launch covers all tiles: a CTA takes (tile, M block,
// K split), gathers the tile's kept rows of the feature-major activations xT (K x M) with 16-byte cp.async (each
// kept row is a contiguous run of M, so the gather is coalesced), streams the tile's dense values, and writes its
// G output columns through `cols`. Tiles come sorted by kept K, heaviest first, so the block scheduler balances
// them over the SMs.
#include <algorithm>

#include "mma_sync.cuh"
#include "tw_device.cuh"

namespace sparseprune {
namespace tw {
namespace {

template <int BM, int BN, int WarpsM, int WarpsN, int Stages>
struct MmaConfig {
  static constexpr int kBM = BM, kBN = BN, kBK = kKStep, kStages = Stages;
  static constexpr int kThreads = WarpsM * WarpsN * 32;
  static constexpr int kWM = BM / WarpsM, kWN = BN / WarpsN;
  static constexpr int kMI = kWM / 16, kNI = kWN / 8;
  static constexpr int kAChunks = BM / 8, kBChunks = BN / 8;
  static constexpr int kAIters = kBK * kAChunks / kThreads;  // A-loader chunks per thread
  static constexpr int kPipeBytes = Stages * kBK * (BM + BN) * 2;
  static constexpr int kEpiBytes = StagedTile<BM, BN>::kBytes;
  static constexpr int kSmemBytes = kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes;
  static_assert(kNI % 2 == 0 && kWM % 16 == 0, "warp tile");
  static_assert(kBK * kAChunks % kThreads == 0, "A loader split");
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
  const int per_split = (ksteps + splits - 1) / splits;
  const int s0 = split * per_split, s1 = min(ksteps, s0 + per_split);
  if (splits > 1 && s0 >= s1) return;  // the workspace already holds zeros for this slice

  int row_idx[Cfg::kAIters];  // kept-row indices of the next stage to issue, fetched one step early
  auto fetch_rows = [&](int ks) {
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int r = (tid + j * kThreads) / ACH;
      row_idx[j] = ks < s1 ? w.rows[p0 + ks * BK + r] : -1;
    }
  };
  auto load_stage = [&](int stage, int ks) {
    T* sa = s_a + stage * BK * BM;
    T* sb = s_b + stage * BK * BN;
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int i = tid + j * kThreads, r = i / ACH, c = i % ACH;
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

int block_m(int G) { return G == 128 ? Cfg128::kBM : (G == 64 ? Cfg64::kBM : Cfg32::kBM); }

template <typename T>
const char* dispatch_mma(const PackedTile& w, const Problem& p, const Plan& plan) {
  switch (w.granularity) {
    case 128: return run_mma<T, Cfg128>(w, p, plan.splits);
    case 64: return run_mma<T, Cfg64>(w, p, plan.splits);
    case 32: return run_mma<T, Cfg32>(w, p, plan.splits);
    default: return "granularity must be 32, 64 or 128";
  }
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
  const bool direct = p.sym == 1 && w.res_ptr == nullptr;  // 256 rows: items(256) >= num_sms, so no K split
  const bool may_take_256 = !ws || direct || !ws_needs_direct_epilogue(w.granularity, 256);
  if (may_take_256 && items(256) >= 2LL * p.num_sms && w.max_tile_k >= kLongItemK) return 256;
  const int64_t mean_k = w.value_rows / w.num_tiles;
  if (ws_unsplit && may_take_256 && w.granularity == 64) {
    if (items(256) >= p.num_sms || (4 * items(256) >= 3LL * p.num_sms && mean_k >= 2 * kLongItemK)) return 256;
  }
  // Cooperative 192-row items where they take fewer rows per SM than rounds of 128-row ones, counted 10% dearer
  // (their epilogue is not hidden), and where tiles keep about as many rows each (vector-wise N:M: BERT FFN out at
  // 2:8 runs as one round of 132 items of 192 rows instead of 192 items of 128 on 132 SMs) or the items are long
  // into a feature-major y (G = 128), which the four-stage 192-row configuration takes. With uneven tiles and three
  // stages the heaviest-first schedule's pairing of heavy 128-row items with light ones won (BERT FFN out at 40%:
  // 34.8 against 37.5 us); with four stages and long items 192 rows win (bench/results/tw_h200_192_long_uneven.md:
  // BERT FFN out at 30-40% and VGG conv4 at 40-50%, 7-25% faster on an H200).
  const auto rows_per_sm = [&](int bm) { return cdiv(items(bm), p.num_sms) * static_cast<int64_t>(bm); };
  const bool even_tiles = 20LL * w.max_tile_k <= 23 * mean_k;
  const bool long_direct = w.granularity == 128 && finishes_long_items_directly(w, p, 1);  // ws_unsplit: no K split
  if (ws_unsplit && (even_tiles || long_direct) && 11 * rows_per_sm(192) < 10 * rows_per_sm(128)) return 192;
  return 128;
}

int splits_for(const PackedTile& w, const Problem& p, int bm) {
  // Split K only when the CTAs would fill less than half the GPU: a second wave costs as much as the atomics and
  // the finalize pass that splitting adds.
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
    case Path::kGemvMma:
      e = launch_gemv(w, p, plan);
      break;
    case Path::kWgmma:
      e = launch_wgmma(w, p, plan);
      break;
    case Path::kWgmmaWs:
      e = launch_wgmma_ws(w, p, plan);
      break;
    case Path::kWgmmaRows:
      e = launch_wgmma_rows(w, p);
      break;
    case Path::kMmaSync:
      e = dispatch_mma<T>(w, p, plan);
      break;
    default:
      return "the requested TW kernel path is unavailable (wgmma needs an sm_90a build, a Hopper GPU and G 64/128)";
  }
  if (e != nullptr) return e;
  if (plan.splits > 1) return run_finalize<T>(w, p, true);
  // Without a K split the GEMVs and the mma.sync kernel finish every column themselves, and the warp-specialized
  // kernel a feature-major y's.
  if (plan.path == Path::kGemv || plan.path == Path::kGemvMma || plan.path == Path::kMmaSync) return nullptr;
  if (plan.path == Path::kWgmmaRows || (plan.path == Path::kWgmmaWs && fills_pruned_columns(p, 1))) return nullptr;
  return run_finalize<T>(w, p, false);
}

}  // namespace

Plan make_plan(const PackedTile& w, const Problem& p) {
  if (p.M <= kSmallM) return gemv_plan(w, p);
  if (const std::optional<Plan> plan = mma_gemv_plan(w, p)) return *plan;
  Plan plan{};
  const bool hopper_ok = (w.granularity == 64 || w.granularity == 128) && wgmma_available();
  const Path wanted = p.path == Path::kAuto ? (hopper_ok ? Path::kWgmmaWs : Path::kMmaSync) : p.path;
  const bool wants_wgmma = wanted == Path::kWgmma || wanted == Path::kWgmmaWs || wanted == Path::kWgmmaRows;
  if (wants_wgmma && !hopper_ok) {
    plan.path = Path::kUnavailable;
    return plan;
  }
  if (wanted == Path::kWgmmaRows) {  // every height of item in one launch, no K split (tw_gemm_sm90_rows.cu)
    return Plan{Path::kWgmmaRows, 0, 1};
  }
  plan.path = wants_wgmma ? wanted : Path::kMmaSync;
  if (wants_wgmma) {
    plan.block_m = wgmma_block_m(w, p, plan.path);
  } else {
    plan.block_m = block_m(w.granularity);
  }
  // Where 128-row items spread few, uneven tiles badly over the SMs, items of any height (tw_gemm_sm90_rows.cu).
  if (p.path == Path::kAuto && plan.path == Path::kWgmmaWs && plan.block_m == 128 && p.M >= kWsSplitMaxM &&
      rows_schedule_pays(w, p)) {
    return Plan{Path::kWgmmaRows, 0, 1};
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

bool runs_gemv(const PackedTile& w, const Problem& p) {
  if (w.num_tiles == 0) return false;  // the finalize pass alone writes y (see run)
  const Path path = make_plan(w, p).path;
  return path == Path::kGemv || path == Path::kGemvMma;
}

// One 16-byte run of out per thread, read element by element (in's rows are not 16-byte runs).
template <typename T>
__global__ void __launch_bounds__(kTransposeThreads)
    pad_rows_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t R, int64_t C, int64_t ld_in,
                    int64_t ld_out) {
  allow_dependent_launch();  // the GEMV that reads the padded rows
  const int64_t runs = ld_out / 8, i = static_cast<int64_t>(blockIdx.x) * kTransposeThreads + threadIdx.x;
  if (i >= R * runs) return;
  const int64_t r = i / runs, c0 = i % runs * 8;
  alignas(16) T v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = c0 + e < C ? in[r * ld_in + c0 + e] : from_float<T>(0.0f);
  *reinterpret_cast<uint4*>(out + r * ld_out + c0) = *reinterpret_cast<const uint4*>(v);
}

const char* launch_tw_matmul(const PackedTile& w, const Problem& p) {
  return p.dtype == DType::kHalf ? run<__half>(w, p) : run<__nv_bfloat16>(w, p);
}

// Calls copy(T{}) with a value of the activations' element type: how the x and y copies pick their kernel.
template <typename Copy>
const char* with_element_type(DType dtype, Copy&& copy) {
  return dtype == DType::kHalf ? copy(__half{}) : copy(__nv_bfloat16{});
}

const char* launch_transpose(const void* in, void* out, int64_t R, int64_t C, int64_t ld_in, int64_t ld_out,
                             DType dtype, cudaStream_t stream, bool after_gemm) {
  if (R == 0 || C == 0) return nullptr;
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool vec = ld_in % 8 == 0 && ld_out % 8 == 0 && aligned(in) && aligned(out);
  const dim3 grid(cdiv(C, kTransposeCols), cdiv(R, kTransposeRows));
  return with_element_type(dtype, [&](auto element) {
    using T = decltype(element);
    return launch_kernel(transpose_kernel<T>, grid, dim3(kTransposeThreads), 0, stream, after_gemm,
                         static_cast<const T*>(in), static_cast<T*>(out), R, C, ld_in, ld_out, vec);
  });
}

const char* launch_pad_rows(const void* in, void* out, int64_t R, int64_t C, int64_t ld_in, int64_t ld_out,
                            DType dtype, cudaStream_t stream) {
  if (R == 0 || ld_out == 0) return nullptr;
  const dim3 grid(cdiv(R * (ld_out / 8), kTransposeThreads));
  return with_element_type(dtype, [&](auto element) {
    using T = decltype(element);
    return launch_kernel(pad_rows_kernel<T>, grid, dim3(kTransposeThreads), 0, stream, false,
                         static_cast<const T*>(in), static_cast<T*>(out), R, C, ld_in, ld_out);
  });
}

}  // namespace tw
}  // namespace sparseprune
