// General N:M sparse GEMM on CUDA cores: host-side launch interface shared by the torch binding and nm_gemm.cu.
// Kept free of torch headers so the .cu file compiles fast; the binding validates everything before calling here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "tw_gemm.h"

namespace sparseprune {
namespace nm {

using tw::Activation;
using tw::DType;

// Packed N:M weight B (K x N), see sparseprune/export/formats/nm.py. Packed row r (r < rows = K/m*kept) belongs to
// group r / kept; its entry for column n sits at K index (r / kept) * m + (its in-group position).
// Element-wise packings (vector 1) store values and positions in column panels of kPanel columns, [panel][row]
// [column] (the last panel narrower when N % kPanel != 0), so that a CTA owning one panel streams one contiguous
// block; positions take 4 bits for m <= 16 (two columns per byte, the even column in the low nibble), else a byte.
// Vector-wise packings keep values [rows, N] and positions uint8 [rows, N/vector], row-major.
constexpr int kPanel = 32;

// Bits per stored in-group position; must match index_bits in sparseprune/export/formats/nm.py.
constexpr int index_bits(int64_t m, int64_t vector) { return vector == 1 && m <= 16 ? 4 : 8; }

struct PackedNMView {
  const void* values;  // as above, 16-byte aligned
  const uint8_t* idx;  // in-group positions, < m, as above, 8-byte aligned
  int64_t K;
  int64_t N;
  int64_t rows;  // K / m * kept
  int m;         // group size, a power of two in [2, 32]
  int kept;      // entries kept per group, in [1, m)
  int vector;    // adjacent columns sharing one position list
  int idx_bits;  // 4 or 8 for element-wise packings, 8 for vector-wise ones
};

// One call: y = act(x @ B + bias), x (M x K) and y (M x N) row-major with row strides ldx and ldy.
struct Problem {
  const void* x;
  int64_t M;
  int64_t ldx;
  const void* bias;  // [N] or nullptr
  void* y;
  int64_t ldy;
  Activation activation;
  DType dtype;
  float* workspace;  // workspace_floats() fp32 entries (need not be zeroed), or nullptr when that is 0
  int num_sms;
  cudaStream_t stream;
};

constexpr int kSmallM = 16;  // M up to this runs the memory-bound SpMV kernel, larger M the SIMT SpMM
constexpr int kMaxM = 32;    // largest group the kernels take (M a power of two from 2)
// Rows of x from which the SpMV hands an element-wise packing the tensor-core GEMV (nm_gemv_mma.cu) supports over to
// it: its time hardly moves with the rows, the SpMV's grows with every one (H200, 4096 x 11008: at 8 rows the
// tensor-core GEMV is faster on every pattern, bench/results/nm_h200_gemv_mma.md; at 4, where the SpMV fits three
// CTAs per SM, the SpMV on every pattern, 15-22 us against the GEMV's 21-29 at 5 rows,
// bench/results/nm_h200_rows_flat_expand.md).
constexpr int kGemvMmaMinM = 5;
constexpr int kGemvMmaStep = 32;  // the tensor-core GEMV's K step and CTA columns: K and N must be multiples of it

// fp32 entries of the split-K workspace the launch needs (0: none).
int64_t workspace_floats(const PackedNMView& w, const Problem& p);

// Launches the N:M GEMM; returns nullptr on success, else a static error message (every launch is checked).
const char* launch_nm_matmul(const PackedNMView& w, const Problem& p);

// Implemented in nm_gemv_mma.cu: whether the tensor-core GEMV takes this packing and x (element-wise, kept / m at
// most 1/2, K a multiple of 32, N of 32, x rows 16-byte aligned), and its launch over `splits` K splits (into the
// workspace when above 1).
bool gemv_mma_supported(const PackedNMView& w, const Problem& p);
const char* launch_gemv_mma(const PackedNMView& w, const Problem& p, int splits);

}  // namespace nm
}  // namespace sparseprune
