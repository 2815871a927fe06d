// Element-wise N:M at a few rows of x on tensor cores. A row of x costs the CUDA-core SpMV one shared-memory read
// per multiply-add, so from a few rows it is bound by those reads instead of by the weight (2:8 on 4096 x 11008:
// 170 us at 16 rows against 14 at one). Here each warp expands its K steps of 32 dense rows back into a dense
// 32 x 32 block of the CTA's 32 columns in shared memory (kept values at their in-group positions, zeros elsewhere)
// and runs m16n8k16 MMAs on it with up to 16 rows of x: the weight is still read once, compressed, and the
// expanded zeros cost only tensor-core time, which these sizes have to spare.
//
// CTA = one 32-column panel x a range of K steps (its K split, blockIdx.y); warp w takes steps w, w + 8, ... Each
// step's packed values (32 K rows x kept / m of them), their in-group positions and the step's 32 columns of x are copied
// with 16-byte cp.async into the warp's ring of kStages stages, kStages - 1 steps ahead of the multiplies.
#include "mma_sync.cuh"
#include "nm_device.cuh"

namespace sparseprune {
namespace nm {
namespace {

using tw::cp_async16_to;
using tw::cp_async_commit;
using tw::cp_async_wait;
using tw::ldmatrix_x4;
using tw::ldmatrix_x4_trans;
using tw::mma_16816;
using tw::smem_addr;
using tw::swizzle;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = kGemvMmaStep;   // columns per CTA
constexpr int kStepK = kGemvMmaStep;  // dense K rows per step: two k16 MMAs
constexpr int kMaxRows = 16;   // packed rows per step at most: kept / m <= 1/2
constexpr int kStages = 3;  // six, at one CTA per SM, were 30% slower
constexpr int kXBytes = kSmallM * kStepK * 2;      // [16 rows of x][32 k], 64-byte rows, swizzled
// The expanded block, [32 k][32 columns], rows 80 bytes apart: the eight 16-byte rows an ldmatrix reads start in
// eight different bank quads, and a value's address is one multiply-add from its K row (no swizzle to compute).
constexpr int kTileStride = kCols * 2 + 16;
constexpr int kTileBytes = kStepK * kTileStride;
// A stage holds [packed row][32 columns] values and positions of IdxBits each for the pattern's packed rows per step,
// so its size follows the pattern: 8:32 (8 rows, byte positions) takes 62 KB a CTA, and three CTAs fit an SM where
// stages sized for 16 rows of bytes (80 KB) fit two, and the decode weight's 344 panels ran in two waves on an H200
// (132 SMs). Stages start 128 bytes apart, so the x block's swizzle stays conflict-free.
template <int IdxBits>
struct Smem {
  __host__ __device__ static constexpr int stage_bytes(int rows) {
    const int idx_bytes = (rows * kCols * IdxBits / 8 + 15) / 16 * 16;
    return (kXBytes + rows * kCols * 2 + idx_bytes + 127) / 128 * 128;
  }
  __host__ __device__ static constexpr int warp_bytes(int rows) { return kStages * stage_bytes(rows) + kTileBytes; }
  __host__ __device__ static constexpr int bytes(int rows) { return kWarps * warp_bytes(rows); }
  static constexpr int kMaxBytes = bytes(kMaxRows);
  static_assert(kWarps * kSmallM * kCols * 4 <= bytes(1), "the warps' partial sums reuse the stages");
};
static_assert(kCols == kPanel, "a CTA's columns are one panel of the element-wise layout");

// Packed rows per K step (kStepK dense rows): what a stage holds, and what its size follows.
__host__ __device__ inline int rows_per_step(const PackedNMView& w) { return kStepK / w.m * w.kept; }

template <typename T, int IdxBits>
__device__ __forceinline__ void gemv_mma(const PackedNMView& w, const Problem& p) {
  constexpr int kIdxRowBytes = kCols * IdxBits / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m = w.m, kept = w.kept, step_rows = rows_per_step(w);
  const int stage_bytes = Smem<IdxBits>::stage_bytes(step_rows);
  const int warp_bytes = Smem<IdxBits>::warp_bytes(step_rows);
  const int idx_offset = kXBytes + step_rows * kCols * 2;  // a stage's positions, after its values
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int total_steps = static_cast<int>(w.K / kStepK);
  const int s_begin = static_cast<int>(static_cast<int64_t>(total_steps) * blockIdx.y / gridDim.y);
  const int s_end = static_cast<int>(static_cast<int64_t>(total_steps) * (blockIdx.y + 1) / gridDim.y);
  const int steps = s_end > s_begin + warp ? (s_end - s_begin - warp + kWarps - 1) / kWarps : 0;
  const uint32_t ring = smem_addr(smem + warp * warp_bytes);
  const uint32_t tile = ring + kStages * stage_bytes;
  unsigned char* tile_ptr = smem + warp * warp_bytes + kStages * stage_bytes;
  const T* x = static_cast<const T*>(p.x);
  const T* vals = static_cast<const T*>(w.values);
  const int M = static_cast<int>(p.M);

  // Copies: x chunks lane and lane + 32 (row chunk / 4, k chunk chunk % 4; zeros past M); value chunks likewise
  // (packed row chunk / 4); the positions of a step are contiguous in the CTA's panel, 16 bytes per lane. The
  // sources of the warp's first step, advanced by a fixed stride per step.
  const int first = s_begin + warp;
  const int64_t panel = packed_offset(w, 0, n0);  // N % kCols == 0: the CTA's columns are one whole panel
  const int64_t step_values = static_cast<int64_t>(kWarps) * step_rows * kCols;  // elements between its steps
  const T* x_src[2];
  const T* value_src[2];
  uint32_t x_dst[2], value_dst[2];
  int x_bytes[2];
  bool value_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int chunk = lane + 32 * h, row = chunk / 4, c = chunk % 4;
    x_bytes[h] = row < M ? 16 : 0;
    x_src[h] = x + (row < M ? row * p.ldx : 0) + static_cast<int64_t>(first) * kStepK + c * 8;
    x_dst[h] = row * 64 + swizzle<4>(row, c) * 16;
    value_ok[h] = row < step_rows;
    value_src[h] = vals + panel + (static_cast<int64_t>(first) * step_rows + row) * kCols + c * 8;
    value_dst[h] = kXBytes + row * 64 + c * 16;
  }
  const bool idx_ok = lane * 16 < step_rows * kIdxRowBytes;
  const uint8_t* idx_src = w.idx + (panel + static_cast<int64_t>(first) * step_rows * kCols) * IdxBits / 8 + lane * 16;
  const int64_t step_idx = step_values * IdxBits / 8;
  // Issues the copies of the warp's next step into the next stage of the ring (steps are copied in order), then moves
  // the sources on by a step: running pointers and stage, where indexing by step cost 50 instructions a step.
  int copied = 0, copy_stage = 0;
  auto copy_next_step = [&]() {
    const uint32_t stage = ring + copy_stage * stage_bytes;
    if (copied < steps) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        cp_async16_to(stage + x_dst[h], x_src[h], x_bytes[h]);
        if (value_ok[h]) cp_async16_to(stage + value_dst[h], value_src[h], 16);
        x_src[h] += kWarps * kStepK;
        value_src[h] += step_values;
      }
      if (idx_ok) cp_async16_to(stage + idx_offset + lane * 16, idx_src, 16);
      idx_src += step_idx;
    }
    cp_async_commit();  // empty past the warp's steps, so that every wait below counts kStages - 1 groups
    ++copied;
    copy_stage = copy_stage == kStages - 1 ? 0 : copy_stage + 1;
  };

  // ldmatrix sources: A (x) rows a_row, k chunk 2h + a_chunk; B (expanded block) k rows 16h + b_row, column chunk
  // b_chunk (+2 for columns 16..31).
  const int li = lane & 7, q = lane >> 3;
  const int a_row = li + (q & 1) * 8, a_chunk = q >> 1;
  const int b_row = li + (q & 1) * 8, b_chunk = q >> 1;
  unsigned char* column = tile_ptr + lane * 2;  // the lane's column in the expanded block
  const int nibble_shift = IdxBits == 4 ? 4 * (lane & 1) : 0;
  const Divisor by_kept(kept);
  float acc[4][4] = {};
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) copy_next_step();
  for (int i = 0, read_stage = 0; i < steps; ++i, read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1) {
    cp_async_wait<kStages - 2>();  // step i's copies are done
    __syncwarp();
    const uint32_t stage = ring + read_stage * stage_bytes;
    // Expand: lane = column; zeros first, then each packed row's value at its K row.
#pragma unroll
    for (int z = 0; z < kTileBytes / 16 / 32; ++z) {
      *reinterpret_cast<uint4*>(tile_ptr + (z * 32 + lane) * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
    __syncwarp();
    const unsigned char* stage_ptr = smem + warp * warp_bytes + read_stage * stage_bytes;
    const uint16_t* packed_vals = reinterpret_cast<const uint16_t*>(stage_ptr + kXBytes) + lane;
    const uint8_t* positions = stage_ptr + idx_offset + lane * IdxBits / 8;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= step_rows) break;
      const int k = by_kept(r) * m + ((positions[r * kIdxRowBytes] >> nibble_shift) & (m - 1));  // stays in its group
      *reinterpret_cast<uint16_t*>(column + k * kTileStride) = packed_vals[r * kCols];
    }
    __syncwarp();
    copy_next_step();  // step i + kStages - 1, into the stage read one step ago
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a[4], b[2][4];
      ldmatrix_x4(a, stage + a_row * 64 + swizzle<4>(a_row, 2 * h + a_chunk) * 16);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * h + b_row;
        ldmatrix_x4_trans(b[half], tile + row * kTileStride + (b_chunk + 2 * half) * 16);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) mma_16816<T>(acc[j], a, &b[j / 2][(j % 2) * 2]);
    }
    __syncwarp();  // the block is read before the next step expands into it
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are reused for the partial sums, [warp][row of x][column]
  // Accumulator e of fragment j: row g (+8 for e >= 2), column 8j + 2t + e % 2.
  float* partial = reinterpret_cast<float*>(smem);
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      partial[(warp * kSmallM + g + (e >> 1) * 8) * kCols + 8 * j + 2 * t4 + (e & 1)] = acc[j][e];
    }
  __syncthreads();
  finish_column_block<T, kCols, kWarps>(partial, kSmallM, n0, w, p);
}

// Registers capped for three CTAs per SM, which the stages of every 4-bit pattern and of byte patterns up to 8
// packed rows per step (8:32) leave room for. (16:32's stages leave room for two; the cap cost 8:32 6% when its
// stages did too.)
template <typename T, int IdxBits>
__global__ void __launch_bounds__(kThreads, 3) nm_gemv_mma_kernel(PackedNMView w, Problem p) {
  gemv_mma<T, IdxBits>(w, p);
}

}  // namespace

bool gemv_mma_supported(const PackedNMView& w, const Problem& p) {
  const bool x_rows16 = p.ldx % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  return w.vector == 1 && 2 * w.kept <= w.m && w.K % kStepK == 0 && w.N % kCols == 0 && x_rows16;
}

template <typename T, int IdxBits>
const char* launch_gemv_mma_typed(const PackedNMView& w, const Problem& p, int splits) {
  constexpr auto kKernel = nm_gemv_mma_kernel<T, IdxBits>;
  if (const char* err = tw::allow_dynamic_smem<kKernel, Smem<IdxBits>::kMaxBytes>()) return err;
  const dim3 grid(static_cast<unsigned>(w.N / kCols), static_cast<unsigned>(splits));
  const int smem_bytes = Smem<IdxBits>::bytes(rows_per_step(w));
  return tw::launch_kernel(kKernel, grid, dim3(kThreads), smem_bytes, p.stream, false, w, p);
}

const char* launch_gemv_mma(const PackedNMView& w, const Problem& p, int splits) {
  if (w.idx_bits == 4) {
    return p.dtype == DType::kHalf ? launch_gemv_mma_typed<__half, 4>(w, p, splits)
                                   : launch_gemv_mma_typed<__nv_bfloat16, 4>(w, p, splits);
  }
  return p.dtype == DType::kHalf ? launch_gemv_mma_typed<__half, 8>(w, p, splits)
                                 : launch_gemv_mma_typed<__nv_bfloat16, 8>(w, p, splits);
}

}  // namespace nm
}  // namespace sparseprune
