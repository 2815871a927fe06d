// 2:4 structured-sparse GEMM on Hopper sparse tensor cores (CUTLASS sm90 wgmma.sp): host-side interface shared by
// the torch binding and sp24_gemm.cu. Free of torch and CUTLASS headers, so only sp24_gemm.cu pays for CUTLASS.
//
// The weight W (N x K, row-major, 2:4 along K) is the sparse operand A of D = W * x^T; x (M x K, row-major) is the
// K-major operand B; D (N x M) is written column-major, which is y = act(x W^T + bias) row-major (M x N).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "tw_gemm.h"

namespace sparseprune {
namespace sp24 {

using tw::Activation;
using tw::DType;

constexpr int kKAlign = 16;  // K multiple: the compressed rows (K/2 elements) must be 16-byte aligned for TMA
constexpr int kNAlign = 8;   // N multiple: 16-byte aligned columns of the column-major output

// CTA tile of the GEMM (N out x rows of x): cooperative wide 128 x 256, tall 256 x 128 and narrow 128 x 64, or
// ping-pong 128 x 128 per consumer warpgroup; auto picks by shape.
enum class Tile : int { kAuto = 0, kWide = 1, kTall = 2, kPingpong = 3, kNarrow = 4 };
constexpr Tile kLastTile = Tile::kNarrow;
constexpr int64_t kTallMinN = 4096;     // auto takes the tall tile from this many output features on
constexpr int64_t kPingpongMaxK = 1024;  // and the ping-pong tile below that up to this K
constexpr int64_t kNarrowMaxM = 64;      // auto takes the narrow tile up to this many rows of x (one of its blocks)

// Sizes of the compressed form of an N x K weight: values [N, values_cols] in the weight's dtype, and the CUTLASS
// metadata (padded to its 64 x 128 atoms) as raw bytes.
struct CompressedSizes {
  int64_t values_cols;
  int64_t meta_bytes;
};

CompressedSizes compressed_sizes(int64_t N, int64_t K);

// True when this build holds sm_90a machine code for the sparse kernels that the current device runs.
bool available();

// Compresses W (N x K, row-major, at most 2 non-zeros in every group of 4 along K) into values and metadata laid out
// as compressed_sizes() says. Returns nullptr on success, else a static error message.
const char* launch_compress(const void* w, int64_t N, int64_t K, DType dtype, void* values, void* meta, int num_sms,
                            cudaStream_t stream);

// One call: y = act(x @ W^T + source + bias), x (M x K), y and source (M x N) contiguous row-major.
struct Problem {
  const void* values;  // compressed W
  const void* meta;
  int64_t N;
  int64_t K;
  const void* x;
  int64_t M;
  const void* bias;    // [N] or nullptr
  const void* source;  // M x N partial result of another pass to add, or nullptr
  void* y;
  Activation activation;
  DType dtype;
  void* workspace;  // workspace_bytes() bytes, or nullptr when that is 0
  Tile tile;
  int device;
  int num_sms;
  cudaStream_t stream;
};

// The tile this call runs: p.tile, or the shape's choice when that is kAuto.
Tile resolve_tile(const Problem& p);

// Bytes of scratch the GEMM needs for this call (0: none).
int64_t workspace_bytes(const Problem& p);

// Launches the sparse GEMM; returns nullptr on success, else a static error message (the launch is checked).
const char* launch_sp24_matmul(const Problem& p);

}  // namespace sp24
}  // namespace sparseprune
