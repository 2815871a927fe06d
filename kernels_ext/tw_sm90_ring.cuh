// Pieces shared by the persistent Hopper TW kernels (tw_gemm_sm90_ws.cu, tw_gemm_sm90_rows.cu): the static
// schedule's order of items, the ring's barriers, how a producer thread covers a stage, the producer's gather of an
// item, ring positions, accumulator fences, a consumer's end of a K step and the tensor map of the packed values. No
// torch headers.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "sm90_wgmma.cuh"
#include "tw_device.cuh"

namespace sparseprune {
namespace tw {

// Registers per thread after the split: the gather needs few, the accumulators many; 128 * 72 + 256 * 216 is the
// 384 * 168 the CTA launches with.
constexpr int kProducerRegs = 72;
constexpr int kConsumerRegs = 216;

// Item of this CTA in round r of the static schedule: items are numbered tile-major and tiles come heaviest first,
// so each round hands out the heaviest remaining items; the direction alternates per round (CTA b takes b, then
// 2*grid-1-b, ...) so that no CTA collects the heaviest item of every round.
__device__ __forceinline__ int scheduled_item(int round) {
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  return round * grid + ((round & 1) ? grid - 1 - b : b);
}

// How a producer thread covers one operand of a stage (64 K rows x Chunks 16-byte chunks): chunks c0 +
// kLanesPerRow h of rows r0 + j * kRowStep. The row step is a multiple of 8, so each copy's swizzled address is the
// first one's plus a compile-time offset, and rows r0 + j * kRowStep < 32 exactly for the first 32 / kRowStep
// values of j. 16 lanes per row where the chunks come in 16s, else 8 (one 64-element slab row each).
template <int Chunks>
struct StageCover {
  static constexpr int kLanesPerRow = Chunks % 16 == 0 ? 16 : 8;
  static constexpr int kRowStep = 128 / kLanesPerRow;
  static constexpr int kRowPasses = 64 / kRowStep, kHalves = Chunks / kLanesPerRow;
  static_assert(Chunks % 8 == 0 && kRowStep % 8 == 0 && 32 % kRowStep == 0,
                "a 128-thread warpgroup covers whole 8-row groups of whole slabs");
  static constexpr int dst_step(int j, int h, int slab_bytes) {
    return j * (kRowStep / 8) * 1024 + h * (kLanesPerRow / 8) * slab_bytes;
  }
};

// Moves a ring position `steps` stages on; the parity flips at every wrap.
template <int Stages>
__device__ __forceinline__ void advance_ring(int& stage, uint32_t& phase, int steps) {
  stage += steps;
  phase ^= static_cast<uint32_t>(stage / Stages) & 1u;
  stage %= Stages;
}

// The next stage of the ring, the step by step form of advance_ring that the K-step loops take.
template <int Stages>
__device__ __forceinline__ void next_stage(int& stage, uint32_t& phase) {
  if (++stage == Stages) {
    stage = 0;
    phase ^= 1;
  }
}

#ifdef SPARSEPRUNE_WGMMA
// The ring's barriers, after its stages in dynamic shared memory (ring: its 1024-byte aligned start, which 128-byte
// swizzle atoms need): per stage `full` (one cp.async arrival per producer thread and one expect_tx) and `empty`
// (empty_arrivals: one per warp that consumes the stage), then two `order` barriers that pass the mainloop between the
// consumer warpgroups (one arrival per warp of the other). Thread 0 initialises them and the CTA syncs, before the
// warpgroups part.
struct RingBarriers {
  uint32_t full, empty, order;
};

template <typename Cfg>
__device__ __forceinline__ RingBarriers init_ring_barriers(uint32_t ring, int empty_arrivals) {
  if ((ring & 1023) != 0) __trap();
  const uint32_t full = ring + Cfg::kBarOffset, empty = full + Cfg::kStages * 8, order = empty + Cfg::kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(full + s * 8, Cfg::kWarpgroup + 1);
      mbarrier_init(empty + s * 8, empty_arrivals);
    }
    mbarrier_init(order, Cfg::kWarpsPerGroup);
    mbarrier_init(order + 8, Cfg::kWarpsPerGroup);
    fence_mbarrier_init();
  }
  __syncthreads();
  return {full, empty, order};
}

// cp_async16_to(dst, ok ? src : fallback, ok ? 16 : 0), both choices made by selp in one asm block: written in C++,
// the choice may compile to a branch around the address arithmetic (it did in gather_item), and a branch around each
// copy made the row-flexible kernel 1.6-2.6 times as slow (bench/results/tw_h200_rows_first.md).
__device__ __forceinline__ void cp_async16_or_zeros(uint32_t dst, bool ok, const void* src, const void* fallback) {
  asm volatile(
      "{\n.reg .pred ok;\n.reg .b64 src;\n.reg .b32 bytes;\nsetp.ne.b32 ok, %1, 0;\nselp.b64 src, %2, %3, ok;\n"
      "selp.b32 bytes, 16, 0, ok;\ncp.async.cg.shared.global [%0], [src], 16, bytes;\n}\n" ::"r"(dst),
      "r"(static_cast<int>(ok)), "l"(src), "l"(fallback));
}

// A producer warpgroup's stages for one item: K steps s0 .. s1 - 1 over the tile's kept rows rows[p0 .. p_end), 64
// per step, each in the next free stage of the ring. Every thread cp.asyncs its 16-byte chunks of the step's rows of
// xT: chunk h of a row from src (this thread's first element in row 0) plus the row and the chunk's offset, zeros for
// padding rows and where in_range[h] is false. Thread 0 has the TMA unit load the step's values behind them (a step
// that ends a tile early also loads the next tile's first rows, which meet zero rows of xT), and both count on the
// stage's full barrier. Lane l holds kept-row indices l and l + 32 of a step, loaded one step ahead, and the copies
// read them by shuffle. The copies are branch-free (cp_async16_or_zeros). Cfg names the ring's
// layout: kStages stages of kStageBytes, the gathered rows first (kGatherBytes), then kValueSlabs slabs of values.
template <typename T, typename Cfg, typename Cover>
__device__ __forceinline__ void gather_item(const int32_t* rows, int p0, int p_end, int s0, int s1, const T* src,
                                            const bool (&in_range)[Cover::kHalves], const T* x, int64_t ldx,
                                            const CUtensorMap& values_map, uint32_t ring, uint32_t full,
                                            uint32_t empty, int& stage, uint32_t& phase) {
  constexpr int BK = Cfg::kBK, kSlab = Cfg::kSlabBytes;
  const int tid = threadIdx.x, lane = tid & 31, r0 = tid / Cover::kLanesPerRow;
  const uint32_t dst = slab_offset(r0, tid % Cover::kLanesPerRow, kSlab);
  const auto fetch_rows = [&](int ks, int& lo, int& hi) {
    const int kg = p0 + ks * BK + lane;
    lo = ks < s1 && kg < p_end ? __ldg(rows + kg) : -1;
    hi = ks < s1 && kg + 32 < p_end ? __ldg(rows + kg + 32) : -1;
  };
  int rows_lo, rows_hi;
  fetch_rows(s0, rows_lo, rows_hi);
  for (int ks = s0; ks < s1; ++ks) {
    int next_lo, next_hi;
    fetch_rows(ks + 1, next_lo, next_hi);
    mbarrier_wait(empty + stage * 8, phase ^ 1);
    const uint32_t sa = ring + stage * Cfg::kStageBytes, bar = full + stage * 8;
#pragma unroll
    for (int j = 0; j < Cover::kRowPasses; ++j) {
      const int r = r0 + j * Cover::kRowStep;
      const int row = __shfl_sync(0xffffffffu, j * Cover::kRowStep < 32 ? rows_lo : rows_hi, r & 31);
      const T* src_row = src + static_cast<int64_t>(row) * ldx;
#pragma unroll
      for (int h = 0; h < Cover::kHalves; ++h) {
        cp_async16_or_zeros(sa + dst + Cover::dst_step(j, h, kSlab), in_range[h] && row >= 0,
                            src_row + 8 * Cover::kLanesPerRow * h, x);
      }
    }
    if (tid == 0) {
      mbarrier_arrive_expect_tx(bar, Cfg::kValueSlabs * kSlab);
#pragma unroll
      for (int h = 0; h < Cfg::kValueSlabs; ++h) {
        tma_load_2d(sa + Cfg::kGatherBytes + h * kSlab, &values_map, 64 * h, p0 + ks * BK, bar);
      }
    }
    cp_async_mbarrier_arrive(bar);
    next_stage<Cfg::kStages>(stage, phase);
    rows_lo = next_lo;
    rows_hi = next_hi;
  }
}

template <int MIWG, int NACC>
__device__ __forceinline__ void fence_accumulators(float (&acc)[MIWG][NACC]) {
#pragma unroll
  for (int i = 0; i < MIWG; ++i)
#pragma unroll
    for (int e = 0; e < NACC; ++e) wgmma_fence_operand(acc[i][e]);
}

// A consumer's end of one K step, after issuing its MMAs: wait for the previous step's, hand that step's stage back to
// the producer (one arrival per warp, from `release_lane`) and move on; `held` is the stage the MMAs just issued read.
template <int Stages, int MIWG, int NACC>
__device__ __forceinline__ void retire_previous_step(float (&acc)[MIWG][NACC], uint32_t empty, bool release_lane,
                                                     int& held, int& stage, uint32_t& phase) {
  wgmma_commit();
  wgmma_wait<1>();  // the previous step's MMAs are done: its stage goes back to the producer
  fence_accumulators(acc);
  if (held >= 0 && release_lane) mbarrier_arrive(empty + held * 8);
  held = stage;
  next_stage<Stages>(stage, phase);
}
#endif

// Tensor map of the packed values (value_rows x G, row-major) in boxes of 64 rows x 64 columns, 128-byte swizzled:
// one box is one 64-column slab of a stage's values, in the layout the wgmma descriptors read.
inline const char* encode_values_map(const PackedTile& w, DType dtype, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return "the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)";
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(w.granularity), static_cast<cuuint64_t>(w.value_rows)};
  const cuuint64_t row_bytes[1] = {static_cast<cuuint64_t>(w.granularity) * 2};
  const cuuint32_t box[2] = {64, 64}, unit_strides[2] = {1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = encode(map, type, 2, const_cast<void*>(w.values), dims, row_bytes, box, unit_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected the packed values (16-byte aligned?)";
}

}  // namespace tw
}  // namespace sparseprune
