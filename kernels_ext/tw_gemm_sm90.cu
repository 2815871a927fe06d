// Tile-wise sparse GEMM, Hopper path (sm_90a wgmma); see tw_gemm.cu for the decomposition and the other paths.
#include "sm90_wgmma.cuh"
#include "tw_device.cuh"

namespace sparseprune {
namespace tw {
namespace {

// Hopper path: same (tile, M block, K split) decomposition, operands staged MN-major in 128-byte-swizzled
// shared memory (x rows gathered as 16-byte cp.async chunks, values streamed), consumed by wgmma of two
// warpgroups; each warpgroup owns MIWG blocks of 64 rows. Tiles' padded K is a multiple of 32, so the last
// 64-row step may issue only two of its four k16 MMAs.
template <int BN, int MIWG, int Stages>
struct WgmmaConfig {
  static constexpr int kBM = 128 * MIWG, kBN = BN, kBK = 64, kStages = Stages, kMIWG = MIWG;
  static constexpr int kThreads = 256;
  static constexpr int kSlabBytes = kBK * 128;  // 64 M (or N) elements x 64 K rows
  static constexpr int kAStageBytes = kBM / 64 * kSlabBytes, kBStageBytes = BN / 64 * kSlabBytes;
  static constexpr int kStageBytes = kAStageBytes + kBStageBytes;
  static constexpr int kAChunks = kBM / 8, kBChunks = BN / 8;
  static constexpr int kAIters = kBK * kAChunks / kThreads, kBIters = kBK * kBChunks / kThreads;
  static constexpr int kPipeBytes = Stages * kStageBytes;
  static constexpr int kEpiBytes = StagedTile<kBM, BN>::kBytes;
  static constexpr int kSmemBytes = (kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes) + 1024;  // + alignment
  static_assert(BN % 64 == 0, "wgmma path covers G = 64 and 128");
};

template <typename T, typename Cfg>
__global__ void __launch_bounds__(256, 1)
    tw_wgmma_kernel(PackedTile w, Problem p, int m_blocks, int splits, bool feature_major_out) {
#ifdef SPARSEPRUNE_WGMMA
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, BK = Cfg::kBK, kStages = Cfg::kStages, MIWG = Cfg::kMIWG;
  constexpr int ACH = Cfg::kAChunks, BCH = Cfg::kBChunks, kThreads = Cfg::kThreads, NACC = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms must sit on 1024-byte boundaries.
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);

  allow_dependent_launch();  // a finalize pass may follow
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int mb = blockIdx.x % m_blocks;
  const int rest = blockIdx.x / m_blocks;
  const int split = rest % splits, tile = rest / splits;
  const T* x = static_cast<const T*>(p.x);
  const T* vals = static_cast<const T*>(w.values);
  const int64_t ldx = p.sxk, M = p.M, m0 = static_cast<int64_t>(mb) * BM;
  const int p0 = w.tile_ptr[tile], p_end = w.tile_ptr[tile + 1];
  const int ksteps = (p_end - p0 + BK - 1) / BK;
  const int per_split = (ksteps + splits - 1) / splits;
  const int s0 = split * per_split, s1 = min(ksteps, s0 + per_split);
  if (splits > 1 && s0 >= s1) return;

  int row_idx[Cfg::kAIters];
  auto fetch_rows = [&](int ks) {
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int kg = p0 + ks * BK + (tid + j * kThreads) / ACH;
      row_idx[j] = ks < s1 && kg < p_end ? w.rows[kg] : -1;
    }
  };
  auto load_stage = [&](int stage, int ks) {
    unsigned char* sa = smem + stage * Cfg::kStageBytes;
    unsigned char* sb = sa + Cfg::kAStageBytes;
#pragma unroll
    for (int j = 0; j < Cfg::kAIters; ++j) {
      const int i = tid + j * kThreads, r = i / ACH, c = i % ACH;
      const int64_t m = m0 + c * 8;
      const bool ok = row_idx[j] >= 0 && m < M;
      const T* src = ok ? x + static_cast<int64_t>(row_idx[j]) * ldx + m : x;
      cp_async16(sa + slab_offset(r, c, Cfg::kSlabBytes), src, ok ? 16 : 0);
    }
#pragma unroll
    for (int j = 0; j < Cfg::kBIters; ++j) {
      const int i = tid + j * kThreads, r = i / BCH, c = i % BCH;
      const int kg = p0 + ks * BK + r;
      const bool ok = kg < p_end;
      const T* src = ok ? vals + static_cast<int64_t>(kg) * BN + c * 8 : vals;
      cp_async16(sb + slab_offset(r, c, Cfg::kSlabBytes), src, ok ? 16 : 0);
    }
  };

  float acc[MIWG][NACC];
#pragma unroll
  for (int i = 0; i < MIWG; ++i)
#pragma unroll
    for (int e = 0; e < NACC; ++e) acc[i][e] = 0.0f;

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

  const uint32_t smem_base = smem_addr(smem);
  for (int ks = s0; ks < s1; ++ks) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();  // cp.async wrote through the generic proxy; wgmma reads through the async proxy
    __syncthreads();
    const uint32_t sa = smem_base + ((ks - s0) % kStages) * Cfg::kStageBytes;
    const uint32_t sb = sa + Cfg::kAStageBytes;
#pragma unroll
    for (int i = 0; i < MIWG; ++i)
#pragma unroll
      for (int e = 0; e < NACC; ++e) wgmma_fence_operand(acc[i][e]);
    wgmma_fence();
    // Always the full step, one straight-line MMA sequence: the half step a 32-padded tile can end with has
    // zero-filled rows in both operands, and a branch between two sequences made ptxas serialize every wgmma.
    wgmma_k_step<T, BN, MIWG, BK / 16>(acc, sa, sb, wg * MIWG, Cfg::kSlabBytes);
    wgmma_commit();
#pragma unroll
    for (int i = 0; i < MIWG; ++i)
#pragma unroll
      for (int e = 0; e < NACC; ++e) wgmma_fence_operand(acc[i][e]);
    wgmma_wait<1>();  // the previous step's MMAs are done: its stage may be refilled once all threads agree
    __syncthreads();
    const int kn = ks + kStages - 1;
    if (kn < s1) load_stage((kn - s0) % kStages, kn);
    cp_async_commit();
    fetch_rows(kn + 1);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < MIWG; ++i)
#pragma unroll
    for (int e = 0; e < NACC; ++e) wgmma_fence_operand(acc[i][e]);
  cp_async_wait<0>();

  const int g = lane >> 2, t4 = lane & 3, wq = warp & 3;
  if (splits > 1) {
#pragma unroll
    for (int i = 0; i < MIWG; ++i)
#pragma unroll
      for (int e = 0; e < NACC; ++e) {
        const int64_t m = m0 + (wg * MIWG + i) * 64 + wq * 16 + g + ((e >> 1) & 1) * 8;
        const int n = (e >> 2) * 8 + 2 * t4 + (e & 1);
        if (m < M) atomicAdd(p.workspace + ws_index(w, p, m, static_cast<int64_t>(tile) * BN + n), acc[i][e]);
      }
    return;
  }
  __syncthreads();
  using Staged = StagedTile<BM, BN>;
  float* s_c = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < MIWG; ++i)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int r = (wg * MIWG + i) * 64 + wq * 16 + g, n = j * 8 + 2 * t4;
      Staged::put(s_c, r, n, acc[i][4 * j], acc[i][4 * j + 1], feature_major_out);
      Staged::put(s_c, r + 8, n, acc[i][4 * j + 2], acc[i][4 * j + 3], feature_major_out);
    }
  Staged::template stage_columns<T, kThreads>(s_c, w, p, tile, tid);
  __syncthreads();
  store_tile<T, BM, BN, kThreads>(s_c, w, p, m0, feature_major_out, tid);
#else
  __trap();  // built without sm_90a: the host never selects this kernel (see wgmma_available)
#endif
}

// CTA tiles of the Hopper path: 256 rows when there are enough CTAs to fill the GPU twice, else 128.
using Wg128x256 = WgmmaConfig<128, 2, 4>;
using Wg128x128 = WgmmaConfig<128, 1, 4>;
using Wg64x256 = WgmmaConfig<64, 2, 4>;
using Wg64x128 = WgmmaConfig<64, 1, 4>;

template <typename T, typename Cfg>
const char* run_wgmma(const PackedTile& w, const Problem& p, int splits) {
  return launch_tiles<Cfg, tw_wgmma_kernel<T, Cfg>>(w, p, splits);
}

template <typename T>
const char* dispatch_wgmma(const PackedTile& w, const Problem& p, const Plan& plan) {
  return with_tile_config<Wg128x256, Wg128x128, Wg64x256, Wg64x128>(
      w, plan, [&](auto cfg) { return run_wgmma<T, decltype(cfg)>(w, p, plan.splits); });
}
}  // namespace

bool wgmma_available() {
  static const bool available = [] {  // per process: one GPU architecture assumed
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, tw_wgmma_kernel<__half, Wg128x128>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion >= 90;
  }();
  return available;
}

const char* launch_wgmma(const PackedTile& w, const Problem& p, const Plan& plan) {
  return p.dtype == DType::kHalf ? dispatch_wgmma<__half>(w, p, plan) : dispatch_wgmma<__nv_bfloat16>(w, p, plan);
}

}  // namespace tw
}  // namespace sparseprune
