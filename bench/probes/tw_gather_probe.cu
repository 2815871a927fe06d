// How fast the warp-specialized TW kernel's producer can gather kept rows of xT, with nothing else in the kernel:
// 132 persistent CTAs fill a ring of 32 KB stages (four, as the TW kernel's) (64 kept rows x 256 M elements, 128-byte swizzled as wgmma
// reads them) item after item, and a consumer warpgroup hands each stage back as soon as it lands. Modes:
//  0: 16-byte cp.async by the 128 producer threads, as kernels_ext/tw_gemm_sm90_ws.cu gathers;
//  1: the TMA unit, one 64-element box of one row per copy (4 per kept row), issued by the 32 lanes of one warp;
//  2: the same TMA copies issued by all four producer warps;
//  3: mode 0 with a ring of six stages (more bytes in flight than the TW kernel's shared memory leaves room for).
// A 1-row box lands at its row's place in the swizzle atom only if the TMA unit swizzles by shared-memory address;
// the check mode compares every landed 16-byte chunk with xT. Built and timed by bench/tw_gather_probe.py; not part
// of the extension.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "sm90_wgmma.cuh"
#include "tw_device.cuh"

namespace {

using namespace sparseprune::tw;

constexpr int kBM = 256, kBK = 64, kSlab = kBK * 128, kStageBytes = kBM / 64 * kSlab, kThreads = 256;
template <int Mode>
constexpr int kStages = Mode == 3 ? 6 : 4;
template <int Mode>
constexpr int kSmem = kStages<Mode> * kStageBytes + 2 * kStages<Mode> * 8;

struct Args {
  const __half* xt;   // K x M, M contiguous
  const int* rows;    // tiles x rows_per_tile kept row indices
  int64_t M;
  int rows_per_tile, tiles, m_blocks;
  int tile_group;     // items numbered M-block-major within groups of this many tiles (1: tile-major, as the TW kernel)
  int* mismatches;    // chunks that differ from xT (check_stages > 0)
  int check_stages;   // stages each CTA checks, from its first
};

__device__ void check_stage(const Args& a, uint32_t sa, const int* rows, int64_t m0, int wtid) {
  for (int idx = wtid; idx < kBK * (kBM / 8); idx += 128) {
    const int r = idx / (kBM / 8), c = idx % (kBM / 8);
    const uint4 want = *reinterpret_cast<const uint4*>(a.xt + static_cast<int64_t>(rows[r]) * a.M + m0 + 8 * c);
    uint4 got;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(got.x), "=r"(got.y), "=r"(got.z), "=r"(got.w)
                 : "r"(sa + slab_offset(r, c, kSlab)));
    if (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w) atomicAdd(a.mismatches, 1);
  }
}

template <int Mode>
__global__ void __launch_bounds__(kThreads, 1) gather_kernel(Args a, const __grid_constant__ CUtensorMap map) {
#ifdef SPARSEPRUNE_WGMMA
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t ring = smem_addr(smem);
  if ((ring & 1023) != 0) __trap();
  constexpr int kRing = kStages<Mode>;
  const uint32_t full = ring + kRing * kStageBytes, empty = full + kRing * 8;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid & 31, warp = wtid / 32;
  constexpr int kTmaWarps = Mode == 1 ? 1 : 4;
  constexpr bool kCpAsync = Mode == 0 || Mode == 3;
  if (tid == 0) {
    for (int s = 0; s < kRing; ++s) {
      mbarrier_init(full + 8 * s, kCpAsync ? 128 : kTmaWarps);
      mbarrier_init(empty + 8 * s, 4);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  const int items = a.tiles * a.m_blocks, steps = a.rows_per_tile / kBK;
  int stage = 0;
  uint32_t phase = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int group = item / (a.tile_group * a.m_blocks), in_group = item % (a.tile_group * a.m_blocks);
    const int tile = group * a.tile_group + in_group % a.tile_group;
    const int64_t m0 = static_cast<int64_t>(in_group / a.tile_group) * kBM;
    const int* rows = a.rows + static_cast<int64_t>(tile) * a.rows_per_tile;
    for (int ks = 0; ks < steps; ++ks, stage = (stage + 1) % kRing, phase ^= stage == 0) {
      const uint32_t sa = ring + stage * kStageBytes;
      const int* step_rows = rows + ks * kBK;
      if (wg == 0) {
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        if constexpr (kCpAsync) {  // 16 lanes per row, two 16-byte chunks each, 8 row passes
          const int r0 = wtid / 16, c0 = wtid % 16;
          const int lo = __ldg(step_rows + lane), hi = __ldg(step_rows + 32 + lane);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int r = r0 + 8 * j, row = __shfl_sync(0xffffffffu, j < 4 ? lo : hi, r & 31);
            const __half* src = a.xt + static_cast<int64_t>(row) * a.M + m0 + 8 * c0;
#pragma unroll
            for (int h = 0; h < 2; ++h) cp_async16_to(sa + slab_offset(r, c0 + 16 * h, kSlab), src + 128 * h, 16);
          }
          cp_async_mbarrier_arrive(full + 8 * stage);
        } else if (warp < kTmaWarps) {  // each lane copies 64 / (32 * kTmaWarps) rows' four boxes
          constexpr int kRowsPerWarp = kBK / kTmaWarps;
          if (lane == 0) mbarrier_arrive_expect_tx(full + 8 * stage, kStageBytes / kTmaWarps);
          __syncwarp();
          for (int r = warp * kRowsPerWarp + lane; r < (warp + 1) * kRowsPerWarp; r += 32) {
            const int row = __ldg(step_rows + r);
            // Each box lands at its row's place in the slab; the unit swizzles its chunks.
#pragma unroll
            for (int s = 0; s < kBM / 64; ++s) {
              tma_load_2d(sa + s * kSlab + r * 128, &map,
                          static_cast<int>(m0) + 64 * s, row, full + 8 * stage);
            }
          }
        }
      } else {
        mbarrier_wait(full + 8 * stage, phase);
        if (a.check_stages > 0 && (item - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) == 0 &&
            ks < a.check_stages) {
          check_stage(a, sa, step_rows, m0, wtid);
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty + 8 * stage);
      }
    }
  }
  if (wg == 0 && kCpAsync) cp_async_wait<0>();
#else
  __trap();
#endif
}

CUtensorMap rows_map(const torch::Tensor& xt) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  TORCH_CHECK(encode != nullptr, "no cuTensorMapEncodeTiled");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(xt.size(1)), static_cast<cuuint64_t>(xt.size(0))};
  const cuuint64_t row_bytes[1] = {static_cast<cuuint64_t>(xt.size(1)) * 2};
  const cuuint32_t box[2] = {64, 1}, unit[2] = {1, 1};
  TORCH_CHECK(encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, xt.data_ptr(), dims, row_bytes, box, unit,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS,
              "cuTensorMapEncodeTiled rejected xT");
  return map;
}

template <int Mode>
void launch(const Args& a, const CUtensorMap& map, int grid) {
  const auto kernel = gather_kernel<Mode>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem<Mode>));
  kernel<<<grid, kThreads, kSmem<Mode>, c10::cuda::getCurrentCUDAStream()>>>(a, map);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

// Gathers rows_per_tile kept rows of xT (K x M, fp16) for every (tile, 256-row M block) item; `rows` holds each
// tile's kept row indices, and the items go M-block-major within groups of tile_group tiles. check_stages > 0 counts the landed chunks that differ from xT into `mismatches`.
void gather(int64_t mode, const torch::Tensor& xt, const torch::Tensor& rows, int64_t rows_per_tile,
            int64_t tile_group, torch::Tensor& mismatches, int64_t check_stages, int64_t grid) {
  TORCH_CHECK(xt.scalar_type() == torch::kHalf && xt.is_contiguous() && xt.size(1) % kBM == 0, "xT: K x M fp16");
  TORCH_CHECK(rows.scalar_type() == torch::kInt && rows.numel() % rows_per_tile == 0 && rows_per_tile % kBK == 0,
              "rows: tiles x rows_per_tile int32, a multiple of 64 each");
  TORCH_CHECK(tile_group >= 1 && (rows.numel() / rows_per_tile) % tile_group == 0, "tile_group divides the tiles");
  const Args a{reinterpret_cast<const __half*>(xt.data_ptr()),
               rows.data_ptr<int>(),
               xt.size(1),
               static_cast<int>(rows_per_tile),
               static_cast<int>(rows.numel() / rows_per_tile),
               static_cast<int>(xt.size(1) / kBM),
               static_cast<int>(tile_group),
               mismatches.data_ptr<int>(),
               static_cast<int>(check_stages)};
  const CUtensorMap map = rows_map(xt);
  const int g = static_cast<int>(grid);
  if (mode == 0) {
    launch<0>(a, map, g);
  } else if (mode == 1) {
    launch<1>(a, map, g);
  } else if (mode == 2) {
    launch<2>(a, map, g);
  } else {
    TORCH_CHECK(mode == 3, "mode 0, 1, 2 or 3");
    launch<3>(a, map, g);
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gather", &gather); }
