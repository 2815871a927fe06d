// Pieces shared by the persistent Hopper TW kernels (tw_gemm_sm90_ws.cu, tw_gemm_sm90_rows.cu): the static
// schedule's order of items, how a producer thread covers a stage, ring positions, accumulator fences and the tensor map of the packed values. No torch
// headers.
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

#ifdef SPARSEPRUNE_WGMMA
template <int MIWG, int NACC>
__device__ __forceinline__ void fence_accumulators(float (&acc)[MIWG][NACC]) {
#pragma unroll
  for (int i = 0; i < MIWG; ++i)
#pragma unroll
    for (int e = 0; e < NACC; ++e) wgmma_fence_operand(acc[i][e]);
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
