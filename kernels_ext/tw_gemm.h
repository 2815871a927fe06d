// Tile-wise (TW/TEW) sparse GEMM: host-side launch interface shared by the torch binding and the CUDA files.
// Kept free of torch headers so the .cu files compile fast; the binding validates everything before calling here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sparseprune {
namespace tw {

enum class DType : int { kHalf = 0, kBFloat16 = 1 };
enum class Activation : int { kNone = 0, kRelu = 1, kGelu = 2 };
// Kernel family: auto picks a GEMV for M <= kSmallM (on CUDA cores, or kGemvMma on tensor cores), the tensor-core
// GEMV up to kMmaGemvMaxM where its CTAs are few, else the warp-specialized wgmma kernel on Hopper builds, else
// mma.sync. kWgmma is the earlier wgmma kernel (every thread loads and multiplies), kept for A/B comparison.
// kWgmmaRows is the Hopper kernel with items of 64-128 rows in steps of 16 (tw_gemm_sm90_rows.cu).
enum class Path : int {
  kAuto = 0,
  kMmaSync = 1,
  kWgmma = 2,
  kWgmmaWs = 3,
  kGemv = 4,
  kGemvMma = 5,
  kUnavailable = 6,
  kWgmmaRows = 7,
};

// Packed TW weight (see sparseprune/export/formats/tw.py). Tile t owns columns cols[t*G .. t*G+G) (-1 pads) and
// kept K rows rows[tile_ptr[t] .. tile_ptr[t+1]) (-1 pads, a multiple of kKStep); its values are a dense
// (tile_ptr[t+1]-tile_ptr[t]) x G block, row-major, starting at values + tile_ptr[t]*G.
struct PackedTile {
  const void* values;
  const int32_t* rows;
  const int32_t* tile_ptr;
  const int32_t* host_tile_ptr;  // tile_ptr in host memory (the row-flexible kernel's schedule), or nullptr
  const int32_t* cols;
  const int32_t* col_pos;      // [N]: position of column n in cols, or -1 when pruned
  const int32_t* pruned_cols;  // [num_pruned]
  const int32_t* res_ptr;      // [N+1] CSC residual (TEW) or nullptr
  const int32_t* res_rows;
  const void* res_vals;
  int32_t num_tiles;
  int32_t granularity;  // G
  int32_t num_pruned;
  int32_t max_tile_k;   // largest padded kept K of any tile
  int64_t value_rows;   // rows of values (tile_ptr[num_tiles]): the values are value_rows x G
  int64_t K;
  int64_t N;
};

// One call: y = act(x @ B + bias). x(m, k) = x[m*sxm + k*sxk], y(m, n) = y[m*sym + n*syn].
struct Problem {
  const void* x;
  int64_t M;
  int64_t sxm, sxk;
  const void* bias;  // [N] or nullptr
  void* y;
  int64_t sym, syn;
  Activation activation;
  DType dtype;
  bool y_vec16;     // y base is 16-byte aligned and the contiguous stride is a multiple of 8 elements
  float* workspace; // zeroed fp32, M * num_tiles * G entries, when needs_workspace() says so, else unused
  int num_sms;
  Path path;  // kAuto, or kMmaSync / kWgmma / kWgmmaWs / kGemvMma to force a kernel family (tests and benchmarks)
  // x was written by the kernel launched just before, of the same call (the binding's transpose): the tensor-core
  // kernels then start as its programmatic dependents and wait for it before their first read of x.
  bool x_from_prior_kernel;
  cudaStream_t stream;
};

// How one call runs: kernel family, CTA rows, K splits (1 = direct epilogue, no workspace).
struct Plan {
  Path path;
  int block_m;
  int splits;
};

constexpr int kKStep = 32;  // kept K of every tile is padded to a multiple of this
constexpr int kGranularities[] = {32, 64, 128};  // tile widths G the kernels are built for
constexpr bool supports_granularity(int64_t g) { return g == 32 || g == 64 || g == 128; }
constexpr int kSmallM = 16;   // M up to this is memory bound: a GEMV streams each packed value once
constexpr int kGemvMaxM = 8;  // M up to this runs on CUDA cores; above, an x with 16-byte rows on tensor cores
constexpr int kMmaGemvMaxM = 256;  // M up to which auto may take the tensor-core GEMV (one launch, no workspace)
// Kept K from which a tile's items are long enough for the warp-specialized kernel's configurations that finish only
// through the direct epilogue (cooperative 256-row items, and the four-stage 192-row ones).
constexpr int kLongItemK = 1024;

// Whether the call can take the warp-specialized kernel's configurations that finish only through the direct
// epilogue: long items into a feature-major y, without split-K or TEW residual. make_plan sends 192-row items on
// uneven tiles only where it holds, and the dispatch picks the four-stage 192-row configuration by it.
inline bool finishes_long_items_directly(const PackedTile& w, const Problem& p, int splits) {
  return splits == 1 && w.res_ptr == nullptr && p.sym == 1 && w.max_tile_k >= kLongItemK;
}

// Kernel family, CTA rows and K splits for this call (also what needs_workspace() decides from).
Plan make_plan(const PackedTile& w, const Problem& p);
// True when the launch needs the zeroed fp32 workspace.
bool needs_workspace(const PackedTile& w, const Problem& p);
// True when a GEMV kernel runs the call: it writes a row-major y's scattered kept columns itself, so a row-major
// call needs no transpose of y. Needs only p's sizes, path and SM count, not its x and y: whichever GEMV the
// alignment of x picks at M <= kSmallM, the answer is the same.
bool runs_gemv(const PackedTile& w, const Problem& p);

// Launches the TW GEMM. Large M needs x feature-major (sxm == 1, sxk % 8 == 0, 16-byte aligned).
// Returns nullptr on success, else a static error message (the launch error is checked after every kernel).
const char* launch_tw_matmul(const PackedTile& w, const Problem& p);

// out[c*ld_out + r] = in[r*ld_in + c] for an R x C matrix: row-major activations to feature-major and back.
// `after_gemm`: `in` is the GEMM's output, written by the kernel launched just before, of the same call; the
// transpose then starts as its programmatic dependent.
const char* launch_transpose(const void* in, void* out, int64_t R, int64_t C, int64_t ld_in, int64_t ld_out,
                             DType dtype, cudaStream_t stream, bool after_gemm);

// out[r*ld_out + c] = c < C ? in[r*ld_in + c] : 0 for r < R and c < ld_out (a multiple of 8, out 16-byte aligned): a
// feature-major x of 9-15 rows copied into 16-byte rows for the tensor-core GEMV, which starts as its programmatic
// dependent.
const char* launch_pad_rows(const void* in, void* out, int64_t R, int64_t C, int64_t ld_in, int64_t ld_out,
                            DType dtype, cudaStream_t stream);

}  // namespace tw
}  // namespace sparseprune
