// Tile-wise sparse GEMM, Hopper warp-specialized persistent path (sm_90a wgmma). Same (tile, M block, K split)
// work items and operand layout as tw_gemm_sm90.cu, but the roles are split so the gather never stalls the MMAs:
//  - one producer warpgroup (few registers) gathers the kept rows of xT into a ring of 128-byte-swizzled stages
//    with 16-byte cp.async, and one of its threads has the TMA unit bring the packed values (a contiguous block
//    per step, swizzled by the tensor map); each thread's copies arrive on the stage's "full" mbarrier by themselves
//    (cp.async.mbarrier.arrive.noinc, complete_tx), so the producer runs ahead without waiting on its own loads;
//  - two consumer warpgroups (many registers) wait on "full", issue wgmma, keep one K step in flight and hand the
//    stage before it back through its "empty" mbarrier; no CTA-wide barrier after the setup. Ping-pong configs
//    give each item to one warpgroup in turn, so one warpgroup's epilogue runs while the other's MMAs keep the
//    tensor cores busy; cooperative configs split each item's rows between both, for items twice as tall, which
//    halves the packed-value traffic per MMA on large problems;
//  - one CTA per SM walks a static list of work items, so the producer already fills the next item's stages while
//    the consumers run the epilogue of the current one;
//  - with a feature-major y the kernel writes the pruned columns itself (bias, residual, activation) rather than
//    leaving them to a launch of their own: ping-pong consumers while they wait for their turn, the producer of
//    cooperative configs after its last stage. Without split-K or a TEW residual, an item's outputs leave through
//    stmatrix and bulk copies, one per output column of a feature-major y or per tile row of a row-major y whose
//    tile owns G adjacent columns (direct_epilogue).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "tw_sm90_ring.cuh"

namespace sparseprune {
namespace tw {
namespace {

// BN = G output columns, BM rows per item. Ping-pong: one warpgroup per item, over all BM rows. Cooperative: both
// warpgroups on every item, warpgroup 0 on the first half of its 64-row blocks (the larger one, for 192 rows), 1 on
// the rest: kBlocks0 and kBlocks1 64-row blocks, from first_block(cwg). PassCols < BN: the item's outputs leave only
// through direct_epilogue into a feature-major y, PassCols columns at a time, so each warpgroup's epilogue buffer
// shrinks to one pass and the ring gains a stage (the host sends every other item to configs with the full fp32
// staging).
template <int BN, int BM, int Stages, bool Cooperative, int PassCols = BN>
struct WsConfig {
  static constexpr bool kCooperative = Cooperative;
  static constexpr int kConsumersPerItem = Cooperative ? 2 : 1;
  static constexpr int kBM = BM, kBN = BN, kBK = 64, kStages = Stages;
  static constexpr int kBlocks0 = Cooperative ? (BM / 64 + 1) / 2 : BM / 64;
  static constexpr int kBlocks1 = Cooperative ? BM / 128 : BM / 64;
  static_assert(BM % 64 == 0 && kBlocks1 >= 1 && kBlocks0 <= 2, "one or two 64-row blocks per warpgroup");
  __device__ static constexpr int first_block(int cwg) { return Cooperative && cwg == 1 ? kBlocks0 : 0; }
  static constexpr int kWarpgroup = 128, kThreads = 3 * kWarpgroup, kWarpsPerGroup = kWarpgroup / 32;
  static constexpr int kSlabBytes = kBK * 128;  // 64 M (or N) elements x 64 K rows
  static constexpr int kGatherBytes = kBM / 64 * kSlabBytes, kValueSlabs = BN / 64;  // xT, then values
  static constexpr int kStageBytes = kGatherBytes + kValueSlabs * kSlabBytes;
  static constexpr int kAChunks = kBM / 8;  // 16-byte chunks per K row of xT
  static constexpr int kPassCols = PassCols;
  static constexpr bool kDirectOnly = PassCols < BN;
  static_assert(BN % PassCols == 0 && PassCols % 16 == 0, "whole passes of 16-column stmatrix groups");
  // Each consumer warpgroup stages its results in its own buffer, apart from the ring, so the producer keeps
  // filling stages during the epilogue: the fp32 staging of 64 rows (consumer_epilogue) or one pass of the T tile's
  // columns (direct_epilogue), then the tile's column list (not for a feature-major y only) and its biases in T.
  static constexpr int kEpiTileBytes =
      kDirectOnly ? PassCols * (kBlocks0 * 64 + 8) * 2 : StagedTile<64, BN>::kFloats * 4;
  static constexpr int kEpiBiasOffset = kEpiTileBytes + (kDirectOnly ? 0 : BN * 4);
  static constexpr int kEpiBytes = kDirectOnly ? kEpiBiasOffset + BN * 2 : StagedTile<64, BN>::kBytes;
  static constexpr int kPipeBytes = Stages * kStageBytes;
  static constexpr int kBarOffset = kPipeBytes + 2 * kEpiBytes;
  // full and empty per stage, then one mainloop-order barrier per consumer warpgroup; the dynamic shared memory
  // starts 1024-byte aligned (the kernel checks), as 128-byte swizzle atoms need.
  static constexpr int kSmemBytes = kBarOffset + (2 * Stages + 2) * 8;
  static_assert(BN % 64 == 0, "wgmma covers G = 64 and 128");
  static_assert(kEpiBytes % 16 == 0, "16-byte aligned buffers and mbarriers");
  static_assert(kSmemBytes <= 227 * 1024, "fits an SM's shared memory");
  static_assert(kStageBytes % 1024 == 0 && kEpiTileBytes % 16 == 0, "aligned stages and epilogue tiles");
};

// One (tile, M block, K split) item. `skip`: past the last item, or a K split that got no steps (the workspace
// already holds its zeros).
struct WorkItem {
  int tile, p0, p_end;  // the tile's kept rows are rows[p0 .. p_end)
  int s0, s1;           // its K steps of 64 rows
  int64_t m0;
  bool skip;
};

// This CTA's item of round `round`. The consumers load items two rounds before they start them, so the tile_ptr
// loads run under the current item instead of between two (each cost a consumer ~700 cycles per item).
template <typename Cfg>
__device__ __forceinline__ WorkItem work_item(const PackedTile& w, int round, int m_blocks, int splits) {
  WorkItem it{};
  const int item = scheduled_item(round);
  it.skip = item >= w.num_tiles * m_blocks * splits;
  if (it.skip) return it;
  const int mb = item % m_blocks, rest = item / m_blocks;
  const int split = rest % splits;
  it.tile = rest / splits;
  it.m0 = static_cast<int64_t>(mb) * Cfg::kBM;
  it.p0 = w.tile_ptr[it.tile];
  it.p_end = w.tile_ptr[it.tile + 1];
  const int ksteps = (it.p_end - it.p0 + Cfg::kBK - 1) / Cfg::kBK;
  const int per_split = (ksteps + splits - 1) / splits;
  it.s0 = split * per_split;
  it.s1 = min(ksteps, it.s0 + per_split);
  it.skip = splits > 1 && it.s0 >= it.s1;
  return it;
}

// Rounds of the static schedule: every CTA walks the same count, some of them ending on skipped items.
__device__ __forceinline__ int schedule_rounds(const PackedTile& w, int m_blocks, int splits) {
  const int grid = static_cast<int>(gridDim.x);
  return (w.num_tiles * m_blocks * splits + grid - 1) / grid;
}

// This CTA's share of a cooperative kernel's pruned-column fill, written after its producer's last stage: share `cta`
// of `ctas`, or cta -1 for none. The CTAs without an item in the last round of the static schedule would idle
// through that round, so where they are at least a quarter of the grid they write the pruned columns alone and the
// CTAs still at work do not wait for a share of their own; otherwise every CTA writes an equal share. (Written
// before the items instead, the fill slowed 8192^3 at 30-50% by 11-27%.)
struct FillShare {
  int cta, ctas;
};
__device__ __forceinline__ FillShare cooperative_fill_share(const PackedTile& w, int m_blocks, int splits) {
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int rounds = schedule_rounds(w, m_blocks, splits);
  const int idle = rounds * grid - w.num_tiles * m_blocks * splits;  // CTAs without a last-round item
  if (4 * idle < grid) return {b, grid};
  // Round r hands its items to CTAs 0, 1, ... when r is even and to CTAs grid-1, grid-2, ... when it is odd.
  const bool ascending = ((rounds - 1) & 1) == 0;
  const int rank = ascending ? b - (grid - idle) : b;
  return {rank < idle && rank >= 0 ? rank : -1, idle};
}

#ifdef SPARSEPRUNE_WGMMA
// Producer warpgroup: fills stage after stage, each one K step (64 kept rows) of one item (gather_item); in
// cooperative configs it then writes its CTA's share of the pruned columns.
template <typename T, typename Cfg>
__device__ __forceinline__ void produce(const PackedTile& w, const Problem& p, const CUtensorMap& values_map,
                                        int m_blocks, int splits, uint32_t ring, uint32_t full, uint32_t empty) {
  using A = StageCover<Cfg::kAChunks>;
  const int tid = threadIdx.x, a_c0 = tid % A::kLanesPerRow;
  const T* x = static_cast<const T*>(p.x);
  if (tid == 0) prefetch_tensormap(&values_map);
  wait_for_prerequisite_grid();  // x may come from the transpose launched just before
  const int rounds = schedule_rounds(w, m_blocks, splits);
  // (Loading the next item's first indices during an item's last step, with that item loaded a round ahead, made
  // every stage of the gather slower: BERT FFN out at 75%, 1209 against 896 cycles per 32 KB stage.)
  int stage = 0;
  uint32_t phase = 0;
  for (int round = 0; round < rounds; ++round) {
    const WorkItem it = work_item<Cfg>(w, round, m_blocks, splits);
    if (it.skip) continue;
    bool a_in_m[A::kHalves];
#pragma unroll
    for (int h = 0; h < A::kHalves; ++h) a_in_m[h] = it.m0 + (a_c0 + A::kLanesPerRow * h) * 8 < p.M;
    gather_item<T, Cfg, A>(w.rows, it.p0, it.p_end, it.s0, it.s1, x + it.m0 + a_c0 * 8, a_in_m, x, p.sxk, values_map,
                           ring, full, empty, stage, phase);
  }
  // Cooperative items: then this CTA's share of the pruned columns, overlapping the consumers' last MMAs and
  // epilogues (ping-pong consumers write them while they wait for their turn). Interleaving them with the waits for
  // free stages kept a fill cursor live through the gather loop, which spilled the producer's registers and slowed
  // every stage. The finalize pass takes every column after split-K, and a row-major y's pruned columns (one 2-byte
  // store per output, better spread over a full grid).
  if (Cfg::kCooperative && fills_pruned_columns(p, splits)) {
    const FillShare share = cooperative_fill_share(w, m_blocks, splits);
    if (share.cta >= 0) {
      PrunedColumnFill<T> fill(w, p, static_cast<int64_t>(share.cta) * Cfg::kWarpsPerGroup + tid / 32,
                               static_cast<int64_t>(share.ctas) * Cfg::kWarpsPerGroup);
      while (!fill.done()) fill.step(w, p);
    }
  }
  cp_async_wait<0>();  // nothing in flight when the warpgroup exits
}

// Epilogue of one consumer warpgroup (cwg) for one item, 64 rows at a time through the warpgroup's staging buffer:
// store_tile (bias, residual, activation, cols), or split-K partial sums into the workspace.
template <typename T, typename Cfg, int MIWG>
__device__ __forceinline__ void consumer_epilogue(const PackedTile& w, const Problem& p, const WorkItem& it,
                                                  int splits, bool feature_major_out, int cwg,
                                                  float (&acc)[MIWG][Cfg::kBN / 2], unsigned char* stage_c) {
  constexpr int BN = Cfg::kBN;
  const int wtid = threadIdx.x % Cfg::kWarpgroup, lane = wtid & 31, wq = wtid >> 5, g = lane >> 2, t4 = lane & 3;
  using Staged = StagedTile<64, BN>;
  float* s_c = reinterpret_cast<float*>(stage_c);
  const int bar_id = 1 + cwg;
  // A rolled loop keeps one copy of the stores; the accumulators are still indexed by compile-time b only.
#pragma unroll 1
  for (int i = 0; i < MIWG; ++i) {
    named_barrier_sync<Cfg::kWarpgroup>(bar_id);  // the previous rows' stores are done reading the buffer
#pragma unroll
    for (int b = 0; b < MIWG; ++b) {
      if (b != i) continue;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int r = wq * 16 + g, n = j * 8 + 2 * t4;
        Staged::put(s_c, r, n, acc[b][4 * j], acc[b][4 * j + 1], feature_major_out);
        Staged::put(s_c, r + 8, n, acc[b][4 * j + 2], acc[b][4 * j + 3], feature_major_out);
      }
    }
    if (i == 0) {
      Staged::template stage_columns<T, Cfg::kWarpgroup>(s_c, w, p, it.tile, wtid);
    }
    named_barrier_sync<Cfg::kWarpgroup>(bar_id);
    const int64_t m0 = it.m0 + (Cfg::first_block(cwg) + i) * 64;
    if (splits > 1) {
      add_partial_tile<64, BN, Cfg::kWarpgroup>(s_c, w, p, m0, it.tile, feature_major_out, wtid);
    } else {
      store_tile<T, 64, BN, Cfg::kWarpgroup>(s_c, w, p, m0, feature_major_out, wtid);
    }
  }
}

// Epilogue of one consumer warpgroup for one item without split-K or TEW residual (the common case): bias and
// activation in registers, the finished tile rounded to T and stored into the warpgroup's staging buffer by
// stmatrix, then one asynchronous bulk copy per run of y. With a feature-major y (RowMajorY false) stmatrix
// transposes, so each output column becomes a contiguous row of the buffer and leaves as one copy; with a row-major
// y, where the tile owns G adjacent columns (vector-wise N:M), each tile row leaves as one copy; for other tiles
// it returns false before writing anything but the column list, and consumer_epilogue takes over. The warpgroup
// goes on to its next item while the copies drain; the fp32 staging and per-thread stores of consumer_epilogue
// took ~7000 cycles per 128 x 128 item, longer than the other warpgroup's MMAs. col and bias: this thread's column
// of the tile (-1 pruned) and its bias, loaded earlier.
template <typename T, typename Cfg, int MIWG, bool RowMajorY>
__device__ __forceinline__ bool direct_epilogue(const Problem& p, const WorkItem& it, int cwg,
                                                float (&acc)[MIWG][Cfg::kBN / 2], unsigned char* stage_c, int col,
                                                T bias) {
  constexpr int BN = Cfg::kBN, kRows = 64 * MIWG, kPassCols = RowMajorY ? BN : Cfg::kPassCols;
  constexpr int kLd = RowMajorY ? BN + 8 : kRows + 8;  // buffer row length: a tile row, or a tile column
  static_assert(!(RowMajorY && Cfg::kDirectOnly), "a row-major y leaves whole tile rows");
  static_assert((RowMajorY ? kRows : kPassCols) * kLd * static_cast<int>(sizeof(T)) <= Cfg::kEpiTileBytes,
                "a pass of the T tile fits the buffer");
  static_assert(!RowMajorY || kRows <= Cfg::kWarpgroup, "a row-major y leaves one tile row per thread");
  const int wtid = threadIdx.x % Cfg::kWarpgroup, lane = wtid & 31, wq = wtid >> 5, t4 = lane & 3;
  int* s_cols = reinterpret_cast<int*>(stage_c + Cfg::kEpiTileBytes);
  T* s_bias = reinterpret_cast<T*>(stage_c + Cfg::kEpiBiasOffset);
  const uint32_t s_tile = smem_addr(stage_c);
  const int bar_id = 1 + cwg;
  bulk_wait_read();  // this thread's copies of the previous item have left the buffer
  if (wtid < BN) {
    s_bias[wtid] = bias;  // exact: the bias came from a T
    if constexpr (RowMajorY) s_cols[wtid] = col;
  }
  named_barrier_sync<Cfg::kWarpgroup>(bar_id);
  int first_col = 0;
  if constexpr (RowMajorY) {  // G adjacent columns from a 16-byte boundary of the row?
    first_col = s_cols[0];
    if (!named_barrier_all<Cfg::kWarpgroup>(bar_id, first_col % 8 == 0 && (wtid >= BN || col == first_col + wtid))) {
      return false;
    }
  }
  const int64_t m0 = it.m0 + Cfg::first_block(cwg) * 64;
  const int64_t rows = p.M - m0 < kRows ? p.M - m0 : kRows;
  // Lane 8q + r addresses row r of matrix q, which holds tile rows from 16 wq + 8 (q % 2) and columns from
  // 8 (j + q / 2): its row r is tile row 16 wq + 8 (q % 2) + r, or (transposed) tile column 8 (j + q / 2) + r,
  // which is buffer row 8 (j + q / 2) + r - pass * kPassCols.
  const int q = lane >> 3, r = lane & 7;
  const int tile_row = wq * 16 + 8 * (q & 1), tile_col = 8 * (q >> 1);
  const uint32_t lane_dst =
      s_tile + (RowMajorY ? (tile_row + r) * kLd + tile_col : (tile_col + r) * kLd + tile_row) * sizeof(T);
  with_activation(p.activation, [&](auto act) {
    constexpr Activation kAct = decltype(act)::value;
#pragma unroll
    for (int pass = 0; pass < BN / kPassCols; ++pass) {
      if (pass > 0) {  // the previous pass's copies have read the buffer
        bulk_wait_read();
        named_barrier_sync<Cfg::kWarpgroup>(bar_id);
      }
#pragma unroll
      for (int jj = 0; jj < kPassCols / 8; jj += 2) {
        const int j = pass * kPassCols / 8 + jj;
        const float2 b0 = ld_shared_pair(s_bias + 8 * j + 2 * t4), b1 = ld_shared_pair(s_bias + 8 * j + 8 + 2 * t4);
#pragma unroll
        for (int i = 0; i < MIWG; ++i) {
          const float* a = &acc[i][4 * j];
          float v[8] = {a[0] + b0.x, a[1] + b0.y, a[2] + b0.x, a[3] + b0.y,
                        a[4] + b1.x, a[5] + b1.y, a[6] + b1.x, a[7] + b1.y};
          activate_fixed<kAct>(v);
          const uint32_t dst = lane_dst + (RowMajorY ? 64 * i * kLd + 8 * jj : 8 * jj * kLd + 64 * i) * sizeof(T);
          const uint32_t r0 = pack2<T>(v[0], v[1]), r1 = pack2<T>(v[2], v[3]), r2 = pack2<T>(v[4], v[5]),
                         r3 = pack2<T>(v[6], v[7]);
          if constexpr (RowMajorY) {
            stmatrix_x4(dst, r0, r1, r2, r3);
          } else {
            stmatrix_x4_trans(dst, r0, r1, r2, r3);
          }
        }
      }
      fence_proxy_async();  // the bulk copies read the tile through the async proxy
      named_barrier_sync<Cfg::kWarpgroup>(bar_id);
      if constexpr (RowMajorY) {
        if (wtid < rows) {  // one tile row per thread: kRows is at most the warpgroup's 128 threads
          T* dst = static_cast<T*>(p.y) + (m0 + wtid) * p.sym + first_col;
          bulk_copy_to_global(dst, s_tile + wtid * kLd * sizeof(T), BN * sizeof(T));
        }
      } else if (wtid / kPassCols == pass && col >= 0 && rows > 0) {  // this thread's column is in the pass
        T* dst = static_cast<T*>(p.y) + static_cast<int64_t>(col) * p.syn + m0;
        const int buffer_row = wtid % kPassCols;
        if (p.y_vec16 && rows % 8 == 0) {
          bulk_copy_to_global(dst, s_tile + buffer_row * kLd * sizeof(T), static_cast<uint32_t>(rows * sizeof(T)));
        } else {  // an unaligned y, or a tail of M that is not a whole 16 bytes
          const T* tile_row = reinterpret_cast<const T*>(stage_c) + buffer_row * kLd;
          for (int e = 0; e < rows; ++e) dst[e] = tile_row[e];
        }
      }
      bulk_commit();
    }
  });
  return true;
}

// Consumer warpgroup cwg (0 or 1), with MIWG blocks of 64 rows. Cooperative: MMAs on its rows of every item, then
// its share of the epilogue. Ping-pong: the CTA's items alternate between the two warpgroups; for each of its own
// it runs the MMAs over all BM rows and then the epilogue, and it skips the other warpgroup's stages in the ring.
// The mainloops take turns through the order barriers (order + 8 * cwg is this warpgroup's): a parity wait tells
// apart only two phases, so a warpgroup must not wait on a stage of its next item before the other one has waited
// on every stage of the item between, or it could see a phase two laps old as complete.
template <typename T, typename Cfg, int MIWG>
__device__ __forceinline__ void consume(const PackedTile& w, const Problem& p, int m_blocks, int splits,
                                        bool feature_major_out, int cwg, uint32_t ring, uint32_t full,
                                        uint32_t empty, uint32_t order, unsigned char* stage_c) {
  constexpr int BK = Cfg::kBK, NACC = Cfg::kBN / 2;
  wait_for_prerequisite_grid();  // a TEW residual or the pruned-column fill reads x
  const bool release_lane = (threadIdx.x & 31) == 0;
  const int wtid = threadIdx.x % Cfg::kWarpgroup;
  const int rounds = schedule_rounds(w, m_blocks, splits);
  // direct_epilogue needs whole outputs in registers (no split-K) and nothing else to add (no TEW residual); a
  // row-major y takes it where the item's tile owns G adjacent columns (checked per item).
  const bool finishes_in_registers = splits == 1 && w.res_ptr == nullptr;
  const bool direct = finishes_in_registers && feature_major_out;
  const bool direct_rows = finishes_in_registers && !feature_major_out && p.y_vec16;
  const T* bias = static_cast<const T*>(p.bias);
  int stage = 0, turn = 0;
  uint32_t phase = 0, order_parity = cwg == 0 ? 1 : 0;  // warpgroup 0 goes first: a fresh barrier passes parity 1
  float acc[MIWG][NACC];
  // Ping-pong: the eight consumer warps write the pruned columns while they wait for their turn, a step at a time;
  // left to the producer after its last stage, those stores ran after the gather instead of beside it (BERT QKV at
  // 75%: a third of the kernel). Whatever is left when the items are done follows them.
  constexpr int kFillWarps = 2 * Cfg::kWarpsPerGroup;
  const bool fills = !Cfg::kCooperative && fills_pruned_columns(p, splits);
  PrunedColumnFill<T> fill(w, p,
                           static_cast<int64_t>(blockIdx.x) * kFillWarps + cwg * Cfg::kWarpsPerGroup + wtid / 32,
                           fills ? static_cast<int64_t>(gridDim.x) * kFillWarps : 0);
  // Items two rounds ahead: a ping-pong warpgroup's next own item is two rounds on.
  WorkItem next = work_item<Cfg>(w, 0, m_blocks, splits), after = work_item<Cfg>(w, 1, m_blocks, splits);
  for (int round = 0; round < rounds; ++round) {
    const WorkItem it = next;
    next = after;
    after = work_item<Cfg>(w, round + 2, m_blocks, splits);
    if (it.skip) continue;
    if constexpr (!Cfg::kCooperative) {
      if ((turn++ & 1) != cwg) {
        advance_ring<Cfg::kStages>(stage, phase, it.s1 - it.s0);
        continue;
      }
    }
    // This thread's output column for the direct epilogue, loaded before the wait for its turn (which hides the
    // load), and its bias while the last MMAs run.
    const int col = (direct || direct_rows) && wtid < Cfg::kBN ? w.cols[it.tile * Cfg::kBN + wtid] : -1;
    if constexpr (!Cfg::kCooperative) {
      while (!mbarrier_test_wait(order + 8 * cwg, order_parity)) {
        if (!fill.done()) fill.step(w, p);
      }
      order_parity ^= 1;
    }
#pragma unroll
    for (int i = 0; i < MIWG; ++i)
#pragma unroll
      for (int e = 0; e < NACC; ++e) acc[i][e] = 0.0f;
    int held = -1;  // stage whose MMAs may still be running
    for (int ks = it.s0; ks < it.s1; ++ks) {
      // The stage's cp.async copies have completed when its mbarrier phase flips; wgmma reads them without a proxy
      // fence, as CUTLASS's cp.async GMMA mainloops do (one per step cost the 8192^3 case up to 8%).
      mbarrier_wait(full + stage * 8, phase);
      const uint32_t sa = ring + stage * Cfg::kStageBytes, sb = sa + Cfg::kGatherBytes;
      fence_accumulators(acc);
      wgmma_fence();
      // Always the full step, one straight-line MMA sequence: the half step a 32-padded tile can end with has
      // zero-filled rows in both operands, and a branch between two sequences made ptxas serialize every wgmma.
      wgmma_k_step<T, Cfg::kBN, MIWG, BK / 16>(acc, sa, sb, Cfg::first_block(cwg), Cfg::kSlabBytes);
      retire_previous_step<Cfg::kStages>(acc, empty, release_lane, held, stage, phase);
    }
    if (!Cfg::kCooperative && release_lane) {
      mbarrier_arrive(order + 8 * (1 - cwg));  // every stage of this item waited on: the other's turn
    }
    const T col_bias = bias != nullptr && col >= 0 ? bias[col] : T{};
    wgmma_wait<0>();
    fence_accumulators(acc);
    if (held >= 0 && release_lane) mbarrier_arrive(empty + held * 8);
    if constexpr (Cfg::kDirectOnly) {  // make_plan sends only a feature-major y without split or residual here
      if (!direct) __trap();
      direct_epilogue<T, Cfg, MIWG, false>(p, it, cwg, acc, stage_c, col, col_bias);
    } else if (direct) {
      direct_epilogue<T, Cfg, MIWG, false>(p, it, cwg, acc, stage_c, col, col_bias);
    } else if (!(direct_rows && direct_epilogue<T, Cfg, MIWG, true>(p, it, cwg, acc, stage_c, col, col_bias))) {
      consumer_epilogue<T, Cfg, MIWG>(w, p, it, splits, feature_major_out, cwg, acc, stage_c);
    }
  }
  while (!fill.done()) fill.step(w, p);
  bulk_wait_read();  // the staging buffer stays allocated until the last copies have read it
}
#endif

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    tw_wgmma_ws_kernel(PackedTile w, Problem p, const __grid_constant__ CUtensorMap values_map, int m_blocks,
                       int splits, bool feature_major_out) {
#ifdef SPARSEPRUNE_WGMMA
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t ring = smem_addr(smem);
  allow_dependent_launch();  // a finalize pass may follow
  const int wg = threadIdx.x / Cfg::kWarpgroup;
  // Both warpgroups consume each stage of a cooperative item.
  const RingBarriers bars = init_ring_barriers<Cfg>(ring, Cfg::kWarpsPerGroup * Cfg::kConsumersPerItem);
  const uint32_t full = bars.full, empty = bars.empty, order = bars.order;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    produce<T, Cfg>(w, p, values_map, m_blocks, splits, ring, full, empty);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    unsigned char* stage_c = smem + Cfg::kPipeBytes + (wg - 1) * Cfg::kEpiBytes;
    // One inlined copy of the consumer where both warpgroups own as many rows (two copies spill registers).
    if constexpr (Cfg::kBlocks0 == Cfg::kBlocks1) {
      consume<T, Cfg, Cfg::kBlocks0>(w, p, m_blocks, splits, feature_major_out, wg - 1, ring, full, empty, order,
                                     stage_c);
    } else if (wg == 1) {
      consume<T, Cfg, Cfg::kBlocks0>(w, p, m_blocks, splits, feature_major_out, 0, ring, full, empty, order, stage_c);
    } else {
      consume<T, Cfg, Cfg::kBlocks1>(w, p, m_blocks, splits, feature_major_out, 1, ring, full, empty, order, stage_c);
    }
  }
#else
  __trap();  // built without sm_90a: the host never selects this kernel (see wgmma_available)
#endif
}

// Cooperative 256-row items (4 stages of 48 KB for G = 128, finishing only through direct_epilogue in passes of 64
// columns; 4 of 40 KB for G = 64), cooperative 192-row items (for G = 128, 4 of 40 KB finishing only through
// direct_epilogue, else 3 of 40 KB; 4 of 32 KB for G = 64), ping-pong 128-row items (4 of 32 KB, 6 of 24 KB), or
// ping-pong 64-row items (6 of 24 KB, 8 of 16 KB): make_plan's wgmma_block_m chooses the rows, dispatch the first
// configuration of them that can finish the call.
using Ws128x256 = WsConfig<128, 256, 4, true, 64>;
using Ws128x192Direct = WsConfig<128, 192, 4, true, 64>;
using Ws128x192 = WsConfig<128, 192, 3, true>;
using Ws128x128 = WsConfig<128, 128, 4, false>;
using Ws128x64 = WsConfig<128, 64, 6, false>;
using Ws64x256 = WsConfig<64, 256, 4, true>;
using Ws64x192 = WsConfig<64, 192, 4, true>;
using Ws64x128 = WsConfig<64, 128, 6, false>;
using Ws64x64 = WsConfig<64, 64, 8, false>;

// One persistent CTA per SM: at most one per item, unless the kernel writes pruned columns, which every SM helps
// with.
template <typename T, typename Cfg>
const char* run_ws(const PackedTile& w, const Problem& p, int splits) {
  constexpr auto kKernel = tw_wgmma_ws_kernel<T, Cfg>;
  if (const char* err = allow_dynamic_smem<kKernel, Cfg::kSmemBytes>()) return err;
  CUtensorMap values_map{};  // left empty when every tile is empty: no item then has a K step to load
  if (w.value_rows > 0) {
    if (const char* err = encode_values_map(w, p.dtype, &values_map)) return err;
  }
  const int m_blocks = cdiv(p.M, Cfg::kBM);
  const int64_t items = static_cast<int64_t>(w.num_tiles) * m_blocks * splits;
  if (items > INT32_MAX) return "too many TW work items for one launch";
  const int sms = std::max(1, p.num_sms);
  const bool fill_everywhere = fills_pruned_columns(p, splits) && w.num_pruned > 0;
  const int grid = fill_everywhere ? sms : static_cast<int>(std::min<int64_t>(items, sms));
  return launch_kernel(kKernel, dim3(grid), dim3(Cfg::kThreads), Cfg::kSmemBytes, p.stream, p.x_from_prior_kernel, w,
                       p, values_map, m_blocks, splits, p.sym == 1);
}

template <typename... Cfgs>
struct WsConfigs {
  // Whether every configuration of this tile width and row block finishes only through direct_epilogue.
  static bool direct_only(int granularity, int block_m) {
    const auto finishes_any = [&](int bn, int bm, bool only_direct) {
      return bn == granularity && bm == block_m && !only_direct;
    };
    return !(finishes_any(Cfgs::kBN, Cfgs::kBM, Cfgs::kDirectOnly) || ...);
  }
  // A direct-only configuration (a deeper ring) takes long items (kLongItemK) into a feature-major y without split-K
  // or TEW residual, as consume's `direct`; the configuration after it of the same tile width and row block takes
  // the rest. Measured on an H200 (bench/results/tw_h200_192_direct_tw.md, nm_vw_h200_192_direct_*.md): four-stage
  // 192-row items were 5-18% faster with 1152-4215 kept rows (vector-wise 2:8 and 2:4 on VGG conv4, 2:4 on BERT FFN
  // out, TW at 30% on VGG conv4), even at 768, and 6-17% slower with 192-384 (vector-wise on BERT QKV).
  template <typename T>
  static const char* dispatch(const PackedTile& w, const Problem& p, const Plan& plan) {
    const bool direct = finishes_long_items_directly(w, p, plan.splits);
    return with_tile_config<Cfgs...>(
        w, plan, [&](auto cfg) { return run_ws<T, decltype(cfg)>(w, p, plan.splits); },
        [&](auto cfg) { return direct || !decltype(cfg)::kDirectOnly; });
  }
};
using AllWsConfigs = WsConfigs<Ws128x256, Ws128x192Direct, Ws128x192, Ws128x128, Ws128x64, Ws64x256, Ws64x192,
                               Ws64x128, Ws64x64>;
}  // namespace

const char* launch_wgmma_ws(const PackedTile& w, const Problem& p, const Plan& plan) {
  return p.dtype == DType::kHalf ? AllWsConfigs::dispatch<__half>(w, p, plan)
                                 : AllWsConfigs::dispatch<__nv_bfloat16>(w, p, plan);
}

bool ws_needs_direct_epilogue(int granularity, int block_m) {
  return AllWsConfigs::direct_only(granularity, block_m);
}

}  // namespace tw
}  // namespace sparseprune
