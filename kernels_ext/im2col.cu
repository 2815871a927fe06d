// im2col into the feature-major layout (see im2col.h). The matrix is kh*kw times the input's size, so the copy is
// bound by its writes; two kernels write it, chosen by the problem's size.
//
// Large planes are staged through shared memory. One CTA owns one band of output rows of one
// (image, channel) plane: it stages the input rows the band reads, zero padding included, then writes each of the
// channel's kh*kw output rows as one contiguous run (row (c, i, j), columns b*L + oh0*ow ...), in 16-byte stores
// where the run allows. With stride 1 along the width and output rows a multiple of 8 wide, the CTA stages kw copies
// of its rows, copy j shifted left by j*dw columns: eight neighbouring outputs of tap (i, j) are then eight aligned
// neighbours in copy j, one 16-byte shared load per 16-byte store; otherwise it stages one copy and gathers each
// output on its own. On an H200 this writes VGG16's matrices 1.3-2.7x faster than the direct kernel
// (bench/results/conv_h200_im2col_ab.md).
//
// Small planes (VGG16 on 32 x 32 images ends in 4 x 4 and 2 x 2) would give a staging CTA a few dozen outputs, and
// few planes and bands would leave SMs without a CTA; there the direct kernel runs: a thread owns 8 consecutive
// outputs m of one channel, across images, reading the input through L1/L2, and writes them for every tap or, where
// the whole copy has few such groups, for one tap each. takes_direct() and spreads_taps() hold the measured rules
// (bench/results/im2col_h200_dispatch.md); Kernel forces either kernel for tests and benchmarks.
#include "im2col.h"

namespace sparseprune {
namespace im2col {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxShiftedCopies = 5;         // kw beyond this stages one copy: kw copies would crowd the SM
constexpr int kBandBytes = 16 * 1024;        // shared memory a CTA aims at, so that several CTAs share an SM
constexpr int kMaxBandBytes = 200 * 1024;    // a single output row's staging may not exceed this
constexpr int kDirectThreads = 256;          // threads of a direct block where each thread writes every tap
constexpr int kSpreadGroups = 32;            // groups of 8 outputs per direct block where the taps are spread
constexpr int kMaxSpreadTaps = 16;           // taps (kh*kw) up to which they may be spread over a block's threads
// Blocks per SM the direct kernel's launch bounds ask for, which holds it to 64 registers: a build of the spreading
// form at 100 registers ran a median 1.9x slower from 8 Ki groups of outputs
// (bench/results/im2col_h200_100_registers.md).
constexpr int kDirectBlocksPerSm = 65536 / (kDirectThreads * 64);
constexpr int kSpreadBlocksPerSm = 65536 / (kSpreadGroups * kMaxSpreadTaps * 64);
constexpr int64_t kSpreadBelow = 24 * 1024;  // groups of 8 outputs (all channels) below which taps are spread
constexpr int kDirectOutputs = 8;            // outputs per thread and row of the direct kernel: one 16-byte store
constexpr int kMaxGridRows = 65535;          // gridDim.y limit: channels beyond it are walked by the same blocks

struct Band {
  int rows;         // output rows per band (the last band may have fewer)
  int input_rows;   // staged input rows of a full band
  int pitch;        // staged row length in elements
  bool shifted;     // takes_shifted_copies(): kw copies, each shifted by one more dilated column
  int copies;       // kw shifted copies, or 1
  int vector;       // outputs per store: 8, 4, 2 or 1
  int count;        // bands per plane
  int64_t smem_bytes;
};

bool takes_shifted_copies(const Problem& p) { return p.sw == 1 && p.out_w % 8 == 0 && p.kw <= kMaxShiftedCopies; }

__host__ __device__ int input_rows_of(const Problem& p, int out_rows) {
  return (out_rows - 1) * p.sh + (p.kh - 1) * p.dh + 1;
}

// The widest store that divides every run: a run starts at b*L + oh0*ow and holds rows*ow outputs.
int store_vector(int plane, int band_outputs) {
  for (int v = 8; v > 1; v /= 2) {
    if (plane % v == 0 && band_outputs % v == 0) return v;
  }
  return 1;
}

Band plan_band(const Problem& p) {
  Band band{};
  band.shifted = takes_shifted_copies(p);
  band.copies = band.shifted ? p.kw : 1;
  band.pitch = band.shifted ? p.out_w : (p.out_w - 1) * p.sw + (p.kw - 1) * p.dw + 1;  // padded columns read
  const int64_t row_bytes = int64_t{band.copies} * band.pitch * 2;
  const auto bytes_of = [&](int rows) { return row_bytes * input_rows_of(p, rows); };
  band.rows = p.out_h;
  while (band.rows > 1 && bytes_of(band.rows) > kBandBytes) band.rows = (band.rows + 1) / 2;
  if (!band.shifted && band.rows < p.out_h) {
    // Runs of a partial plane start at oh0*ow: round the rows so those starts keep the plane's store width.
    const int plane_vector = store_vector(p.out_h * p.out_w, p.out_h * p.out_w);
    while (band.rows < p.out_h && (int64_t{band.rows} * p.out_w) % plane_vector != 0) ++band.rows;
  }
  band.input_rows = input_rows_of(p, band.rows);
  band.vector = band.shifted ? 8 : store_vector(p.out_h * p.out_w, band.rows * p.out_w);
  band.count = (p.out_h + band.rows - 1) / band.rows;
  band.smem_bytes = bytes_of(band.rows);
  return band;
}

template <int kVector>
struct alignas(2 * kVector) Run {
  uint16_t v[kVector];
};

// Stages the band's input rows: element (r, col) of the padded input goes to every copy j that reads it at column
// col - j*dw. Out-of-image positions stage zeros, so the writes need no bounds checks.
__device__ void stage_rows(const Problem& p, const Band& band, const uint16_t* plane, int first_row, int rows,
                           uint16_t* tile) {
  const int read_cols = band.copies > 1 ? band.pitch + (band.copies - 1) * p.dw : band.pitch;
  const int64_t copy_stride = int64_t{band.input_rows} * band.pitch;
  for (int idx = threadIdx.x; idx < rows * read_cols; idx += blockDim.x) {
    const int r = idx / read_cols, col = idx - r * read_cols;
    const int y = first_row + r - p.ph, x = col - p.pw;
    const bool inside = y >= 0 && y < p.height && x >= 0 && x < p.width;
    const uint16_t value = inside ? __ldg(plane + y * p.stride_h + x * p.stride_w) : uint16_t{0};
    for (int j = 0; j < band.copies; ++j) {
      const int shifted_col = col - j * p.dw;
      if (band.copies == 1 || (shifted_col >= 0 && shifted_col < band.pitch)) {
        tile[j * copy_stride + r * band.pitch + (band.copies == 1 ? col : shifted_col)] = value;
      }
    }
  }
}

// kVector outputs per store; kShifted: read kw shifted copies; kSide: a square kernel's side fixed at compile time,
// so its taps unroll (3 for 3 x 3: 2-5% faster with eight images on an H200), or 0 to read it from p.
template <int kVector, bool kShifted, int kSide>
__global__ void __launch_bounds__(kThreads) im2col_staged_kernel(Problem p, Band band) {
  extern __shared__ __align__(16) uint16_t tile[];
  const int band_index = blockIdx.x % band.count;
  const int64_t plane_index = blockIdx.x / band.count;  // b fastest: consecutive CTAs extend the same runs
  const int b = static_cast<int>(plane_index % p.batch), c = static_cast<int>(plane_index / p.batch);
  const int oh0 = band_index * band.rows;
  const int rows = min(band.rows, p.out_h - oh0);
  stage_rows(p, band, p.x + b * p.stride_b + c * p.stride_c, oh0 * p.sh, input_rows_of(p, rows), tile);
  __syncthreads();

  const int plane = p.out_h * p.out_w;
  const int64_t m_total = int64_t{p.batch} * plane;
  uint16_t* run_start = p.out + int64_t{c} * p.kh * p.kw * m_total + int64_t{b} * plane + int64_t{oh0} * p.out_w;
  const int64_t copy_stride = int64_t{band.input_rows} * band.pitch;
  const int runs = rows * p.out_w / kVector;
  for (int v = threadIdx.x; v < runs; v += blockDim.x) {
    const int first = v * kVector;
    int out_row = first / p.out_w, out_col = first - out_row * p.out_w;
    int base[kShifted ? 1 : kVector];  // staged index of each output's tap (0, 0)
    if constexpr (kShifted) {
      base[0] = out_row * p.sh * band.pitch + out_col;
    } else {
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        base[e] = out_row * p.sh * band.pitch + out_col * p.sw;
        if (++out_col == p.out_w) out_col = 0, ++out_row;
      }
    }
    uint16_t* out = run_start + first;
    const int kh = kSide ? kSide : p.kh, kw = kSide ? kSide : p.kw;
#pragma unroll
    for (int i = 0; i < kh; ++i) {
#pragma unroll
      for (int j = 0; j < kw; ++j, out += m_total) {
        Run<kVector> run;
        if constexpr (kShifted) {
          run = *reinterpret_cast<const Run<kVector>*>(tile + j * copy_stride + base[0] + i * p.dh * band.pitch);
        } else {
#pragma unroll
          for (int e = 0; e < kVector; ++e) run.v[e] = tile[base[e] + i * p.dh * band.pitch + j * p.dw];
        }
        *reinterpret_cast<Run<kVector>*>(out) = run;
      }
    }
  }
}

// Thread x of a block owns 8 consecutive outputs m of one channel (across images), the x-th group of the block's:
// their (b, oh, ow) are worked out once, each tap's 8 values leave in one 16-byte store, and the taps of one output
// read the same input lines, through the SM's L1. kSpread gives thread (x, y) tap y alone (blockDim.y = kh*kw), which
// keeps enough reads in flight where one image's small planes give a channel only a few groups of 8; otherwise a
// thread writes every tap.
template <bool kSpread>
__global__ void __launch_bounds__(kSpread ? kSpreadGroups * kMaxSpreadTaps : kDirectThreads,
                                  kSpread ? kSpreadBlocksPerSm : kDirectBlocksPerSm) im2col_direct_kernel(Problem p) {
  const int m_total = p.batch * p.out_h * p.out_w;
  const int m0 = (blockIdx.x * blockDim.x + threadIdx.x) * kDirectOutputs;
  if (m0 >= m_total) return;
  const int plane = p.out_h * p.out_w;
  const bool vector_store = m_total % kDirectOutputs == 0 && m0 + kDirectOutputs <= m_total;  // 16-byte aligned rows
  int64_t image[kDirectOutputs];  // offset of each output's image in x, or -1 past the end
  int top[kDirectOutputs], left[kDirectOutputs];  // input row and column of each output's first kernel tap
  {
    int b = m0 / plane, oh = (m0 % plane) / p.out_w, ow = m0 % p.out_w;
#pragma unroll
    for (int t = 0; t < kDirectOutputs; ++t) {
      image[t] = m0 + t < m_total ? b * p.stride_b : -1;
      top[t] = oh * p.sh - p.ph;
      left[t] = ow * p.sw - p.pw;
      if (++ow == p.out_w) {
        ow = 0;
        if (++oh == p.out_h) oh = 0, ++b;
      }
    }
  }
  // Tap (i, j) of channel c: gathers the 8 outputs' values and stores them at out.
  const auto write_tap = [&](const uint16_t* x_c, int i, int j, uint16_t* out) {
    uint16_t v[kDirectOutputs];
#pragma unroll
    for (int t = 0; t < kDirectOutputs; ++t) {
      const int y = top[t] + i * p.dh, x = left[t] + j * p.dw;
      const bool inside = image[t] >= 0 && y >= 0 && y < p.height && x >= 0 && x < p.width;
      v[t] = inside ? __ldg(x_c + image[t] + y * p.stride_h + x * p.stride_w) : uint16_t{0};
    }
    if (vector_store) {
      uint4 packed;
      packed.x = v[0] | (uint32_t{v[1]} << 16);
      packed.y = v[2] | (uint32_t{v[3]} << 16);
      packed.z = v[4] | (uint32_t{v[5]} << 16);
      packed.w = v[6] | (uint32_t{v[7]} << 16);
      *reinterpret_cast<uint4*>(out) = packed;
    } else {
      for (int t = 0; t < kDirectOutputs && m0 + t < m_total; ++t) out[t] = v[t];
    }
  };
  for (int c = blockIdx.y; c < p.channels; c += gridDim.y) {
    const uint16_t* x_c = p.x + c * p.stride_c;
    uint16_t* out = p.out + static_cast<int64_t>(c) * p.kh * p.kw * m_total + m0;
    if constexpr (kSpread) {  // one pass where blockDim.y = kh*kw; as a loop it compiles to fewer registers
      for (int tap = threadIdx.y; tap < p.kh * p.kw; tap += blockDim.y) {
        write_tap(x_c, tap / p.kw, tap % p.kw, out + int64_t{tap} * m_total);
      }
    } else {
      for (int i = 0; i < p.kh; ++i) {
        for (int j = 0; j < p.kw; ++j, out += m_total) write_tap(x_c, i, j, out);
      }
    }
  }
}

// Groups of 8 consecutive outputs per channel: the direct kernel's unit of work.
int64_t direct_groups(const Problem& p) {
  return (int64_t{p.batch} * p.out_h * p.out_w + kDirectOutputs - 1) / kDirectOutputs;
}

// One thread per group of 8 outputs and every tap works out the group's indexing once for all taps: a median 1.8x
// faster than spreading from 32 Ki groups (all channels). Below 16 Ki groups the GPU is not filled, and spreading the
// taps over threadIdx.y ran a median 2.3x faster (bench/results/im2col_h200_dispatch.md).
bool spreads_taps(const Problem& p) {
  return direct_groups(p) * p.channels < kSpreadBelow && p.kh * p.kw <= kMaxSpreadTaps;
}

const char* launch_direct(const Problem& p, bool spread) {
  const int64_t groups = direct_groups(p);
  const int taps = p.kh * p.kw;
  const int width = spread ? kSpreadGroups : kDirectThreads;
  const dim3 block(static_cast<unsigned>(groups < width ? groups : width), spread ? taps : 1);
  const dim3 grid(static_cast<unsigned>((groups + block.x - 1) / block.x),
                  static_cast<unsigned>(p.channels < kMaxGridRows ? p.channels : kMaxGridRows));
  if (spread) {
    im2col_direct_kernel<true><<<grid, block, 0, p.stream>>>(p);
  } else {
    im2col_direct_kernel<false><<<grid, block, 0, p.stream>>>(p);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// The staged kernel, unless the plane is small (under 7 x 7) or, up to 8 x 8, there are 384 Ki outputs or more per
// tap, where the direct kernel's reads through L1 beat staging, or the staged kernel would run 128 CTAs or fewer, which
// leaves some of an H200's 132 SMs idle, or its band does not fit in shared memory
// (bench/results/im2col_h200_dispatch.md).
bool takes_direct(const Problem& p, const Band& band) {
  const int64_t plane = int64_t{p.out_h} * p.out_w;
  const int64_t planes = int64_t{p.batch} * p.channels;
  return plane < 49 || (plane <= 64 && planes * plane >= 384 * 1024) || planes * band.count <= 128 ||
         band.smem_bytes > kMaxBandBytes;
}

template <int kVector, bool kShifted, int kSide = 0>
const char* launch(const Problem& p, const Band& band, int64_t blocks) {
  const auto kernel = im2col_staged_kernel<kVector, kShifted, kSide>;
  if (band.smem_bytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(band.smem_bytes));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, band.smem_bytes, p.stream>>>(p, band);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch_im2col_feature_major(const Problem& p, Kernel kernel) {
  const int64_t m_total = int64_t{p.batch} * p.out_h * p.out_w;
  const int64_t rows = int64_t{p.channels} * p.kh * p.kw;
  if (m_total >= (int64_t{1} << 31) || rows >= (int64_t{1} << 31)) return "im2col needs B*oh*ow and C*kh*kw < 2^31";
  if (m_total == 0 || rows == 0) return nullptr;
  if (kernel == Kernel::kDirectSpread && p.kh * p.kw > kMaxSpreadTaps) return "im2col: too many taps to spread";
  if (kernel == Kernel::kDirectSpread) return launch_direct(p, true);
  if (kernel == Kernel::kDirect) return launch_direct(p, false);
  const Band band = plan_band(p);
  if (kernel == Kernel::kAuto && takes_direct(p, band)) return launch_direct(p, spreads_taps(p));
  if (band.smem_bytes > kMaxBandBytes) return "im2col: one output row's input rows exceed the shared memory";
  const int64_t blocks = int64_t{p.batch} * p.channels * band.count;
  if (blocks >= (int64_t{1} << 31)) return "im2col needs B*C*bands < 2^31";
  if (band.shifted && p.kh == 3 && p.kw == 3) return launch<8, true, 3>(p, band, blocks);
  if (band.shifted) return launch<8, true>(p, band, blocks);
  switch (band.vector) {
    case 8: return launch<8, false>(p, band, blocks);
    case 4: return launch<4, false>(p, band, blocks);
    case 2: return launch<2, false>(p, band, blocks);
    default: return launch<1, false>(p, band, blocks);
  }
}

}  // namespace im2col
}  // namespace sparseprune
